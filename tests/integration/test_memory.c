/* Memory really goes back: after a workload frees everything and
 * `tcmctl release`, the heap segment's allocated blocks (st_blocks, as the
 * daemon reports them) fall below 5% of their peak; and without any command,
 * once the page heap has been quiet for decay_ms, below 10%. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"

static _Atomic int *phase; /* shared with the child */
static const char *socket_path;

/* arg: stay attached and idle after freeing everything (until phase 3) */
static int workload(void *arg)
{
    bool idle = arg != NULL;
    CHECK_EQ(tcm_init(socket_path), 0);
    enum { SMALL = 200000, LARGE = 64 };
    static void *small[SMALL], *large[LARGE];
    for (int i = 0; i < SMALL; i++) {
        small[i] = tcm_malloc(64 + (i % 16) * 48); /* ~100 MiB over many classes */
        CHECK(small[i] != NULL);
        memset(small[i], 1, 64);
    }
    for (int i = 0; i < LARGE; i++) {
        large[i] = tcm_malloc(1 << 20);
        CHECK(large[i] != NULL);
        memset(large[i], 1, 1 << 20); /* 64 MiB of page runs */
    }
    atomic_store(phase, 1);
    while (atomic_load(phase) != 2)
        usleep(1000);
    for (int i = 0; i < SMALL; i++)
        tcm_free(small[i]);
    for (int i = 0; i < LARGE; i++)
        tcm_free(large[i]);
    if (idle) {
        atomic_store(phase, 3);
        while (atomic_load(phase) != 4)
            usleep(1000);
    }
    tcm_shutdown();
    return 0;
}

/* No tcmctl command: a process frees everything and idles, attached; the
 * daemon gives its cached pages back once decay_ms has passed. */
static void wait_phase(pid_t pid, int want)
{
    for (int t = 0; atomic_load(phase) != want; t++) {
        CHECK_LT(t, 60000);
        CHECK_EQ(waitpid(pid, NULL, WNOHANG), 0); /* the child is still there */
        usleep(1000);
    }
}

static void test_decay(void)
{
    tcm_test_daemon_t d;
    tt_daemon_start(&d, NULL);
    socket_path = d.socket;
    char out[512];
    /* the process's own caches small, so that what is measured is the daemon's */
    CHECK_EQ(tt_tcmctl(&d, "config set tcache_budget 256K", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&d, "config set xfer_budget 0", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&d, "config set run_cache 0", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&d, "config set decay_ms 500", out, sizeof out), 0);
    atomic_store(phase, 0);
    pid_t pid = tt_fork(workload, (void *)1);
    wait_phase(pid, 1);
    uint64_t peak = tt_stat(&d, "bytes_committed"), decays = tt_stat(&d, "decays");
    atomic_store(phase, 2);
    wait_phase(pid, 3);
    /* decays also counts the page cache a busy window did not reuse: wait
     * for the quiet spell's, which leaves under 10% (10 s: 20 decay_ms) */
    uint64_t now = tt_stat(&d, "bytes_committed");
    for (int i = 0; i < 1000 && (now * 10 >= peak || tt_stat(&d, "decays") == decays); i++) {
        usleep(10000); /* (the count goes up just after the pages go back) */
        now = tt_stat(&d, "bytes_committed");
    }
    printf("decay: peak %llu, %llu committed after the quiet spell (%.2f%%)\n", (unsigned long long)peak,
           (unsigned long long)now, 100.0 * (double)now / (double)peak);
    CHECK_GT(tt_stat(&d, "decays"), decays);
    CHECK_LT(now * 10, peak); /* under 10% of peak, with the process still attached */
    CHECK_EQ(tt_stat(&d, "clients_attached"), 1);
    atomic_store(phase, 4);
    tt_wait_ok(pid, 60000);
    tt_daemon_stop(&d);
}

/* A process whose two threads traded objects through its transfer tier and
 * then went idle, both alive: its background thread empties the tier once
 * nobody has used it for decay_ms, and tcmd's heap-full request empties it
 * at once for another process. */
enum { TRADED = 60000 };
static void *traded[TRADED];
static _Atomic int trade_phase;

static void *trade_consumer(void *arg)
{
    (void)arg;
    while (atomic_load(&trade_phase) != 1)
        usleep(100);
    for (int i = 0; i < TRADED; i++) /* frees of another thread's objects: full bins feed the tier */
        tcm_free(traded[i]);
    atomic_store(&trade_phase, 2);
    while (atomic_load(phase) != 9)
        usleep(1000);
    return NULL;
}

static int trader(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    pthread_t t;
    pthread_create(&t, NULL, trade_consumer, NULL);
    for (int i = 0; i < TRADED; i++)
        CHECK((traded[i] = tcm_malloc(1000)) != NULL); /* ~60 MB */
    atomic_store(&trade_phase, 1);
    while (atomic_load(&trade_phase) != 2)
        usleep(100);
    atomic_store(phase, 1); /* both threads idle now, and stay */
    pthread_join(t, NULL);
    tcm_shutdown();
    return 0;
}

static uint64_t cached_by(const tcm_test_daemon_t *d, pid_t pid)
{
    uint64_t cached = 0;
    tt_clients(d, pid, NULL, &cached, NULL);
    return cached;
}

/* A daemon with the given settings ("KEY VALUE", NULL-terminated) and a
 * child that runs body, then idles or keeps busy (phase 1) until told to
 * finish (phase 9). */
static pid_t start_idler(tcm_test_daemon_t *d, const char *const *settings, int (*body)(void *))
{
    tt_daemon_start(d, NULL);
    socket_path = d->socket;
    for (; *settings; settings++) {
        char cmd[96], out[512];
        snprintf(cmd, sizeof cmd, "config set %s", *settings);
        CHECK_EQ(tt_tcmctl(d, cmd, out, sizeof out), 0);
    }
    atomic_store(phase, 0);
    pid_t pid = tt_fork(body, NULL);
    wait_phase(pid, 1);
    return pid;
}

/* What pid caches once it is at most bound, or after 5 s. */
static uint64_t wait_cached_at_most(const tcm_test_daemon_t *d, pid_t pid, uint64_t bound)
{
    uint64_t now = cached_by(d, pid);
    for (int i = 0; i < 500 && now > bound; i++) {
        usleep(10000);
        now = cached_by(d, pid);
    }
    return now;
}

static void stop_idler(tcm_test_daemon_t *d, pid_t pid)
{
    atomic_store(phase, 9);
    tt_wait_ok(pid, 60000);
    tt_daemon_stop(d);
}

static void test_idle_transfer_tier(void)
{
    tcm_test_daemon_t d;
    pid_t pid = start_idler(&d, (const char *[]){"decay_ms 300", NULL}, trader);
    uint64_t before = cached_by(&d, pid), now = wait_cached_at_most(&d, pid, 6u << 20);
    printf("idle transfer tier: %llu bytes cached by the idle process, %llu after decay_ms\n",
           (unsigned long long)before, (unsigned long long)now);
    CHECK_LE(now, 6u << 20);             /* what is left is the two threads' bins */
    CHECK_GE(before - now, 6u << 20);    /* the tier held the rest, and gave it back */
    stop_idler(&d, pid);
}

/* Threads that came and went: each exit leaves the thread's cache in the
 * process's transfer tier (where the next thread finds it without a round
 * trip), and the background thread gives it back once the process has
 * idled for decay_ms. */
static pthread_barrier_t all_running;

static void *short_lived(void *arg)
{
    (void)arg;
    enum { N = 3000 };
    static _Thread_local void *p[N];
    for (int i = 0; i < N; i++)
        CHECK((p[i] = tcm_malloc(700)) != NULL);
    for (int i = 0; i < N; i++)
        tcm_free(p[i]);
    /* the others are still there when each exits (a process's last thread
     * gives its cache straight back: there is nobody to trade with) */
    pthread_barrier_wait(&all_running);
    return NULL;
}

static int churner(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    pthread_barrier_init(&all_running, NULL, 4);
    for (int round = 0; round < 5; round++) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            pthread_create(&t[i], NULL, short_lived, NULL);
        for (int i = 0; i < 4; i++)
            pthread_join(t[i], NULL);
    }
    atomic_store(phase, 1); /* no thread has a cache now; the process idles */
    while (atomic_load(phase) != 9)
        usleep(1000);
    tcm_shutdown();
    return 0;
}

static void test_exited_threads(void)
{
    tcm_test_daemon_t d;
    pid_t pid = start_idler(&d, (const char *[]){"decay_ms 300", NULL}, churner);
    uint64_t before = cached_by(&d, pid), now = wait_cached_at_most(&d, pid, 0);
    printf("exited threads: %llu bytes cached in the transfer tier, %llu after decay_ms\n",
           (unsigned long long)before, (unsigned long long)now);
    CHECK_GE(before, 1u << 20); /* the last round's caches waited there for the next thread */
    CHECK_EQ(now, 0);
    stop_idler(&d, pid);
}

/* `tcmctl release` gives back what processes cache too: the transfer tier
 * that exited threads filled (decay off, so only the release can empty it)
 * goes back, and the segment's blocks fall below 5% of their peak. */
static void test_release_takes_caches(void)
{
    tcm_test_daemon_t d;
    pid_t pid = start_idler(&d, (const char *[]){"decay_ms 0", NULL}, churner);
    char out[512];
    uint64_t cached = cached_by(&d, pid), peak = tt_stat(&d, "bytes_committed");
    CHECK_GE(cached, 1u << 20);
    CHECK_EQ(tt_tcmctl(&d, "release", out, sizeof out), 0);
    uint64_t after = tt_stat(&d, "bytes_committed");
    printf("release with a full transfer tier: %llu bytes cached, committed %llu -> %llu\n",
           (unsigned long long)cached, (unsigned long long)peak, (unsigned long long)after);
    CHECK_EQ(cached_by(&d, pid), 0);
    CHECK_LE(after, peak / 20);
    stop_idler(&d, pid);
}

/* A heap that never goes quiet still gives back what it does not reuse:
 * 40 MiB of page runs freed into the page cache, then page runs of 64 KiB
 * cut and freed without pause (no page-run cache: run_cache 0); within
 * two decay windows the unused part of the cache is gone. */
static int busy_heap(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    void *runs[40];
    for (int i = 0; i < 40; i++) {
        CHECK((runs[i] = tcm_malloc(1 << 20)) != NULL);
        memset(runs[i], 1, 1 << 20);
    }
    for (int i = 0; i < 40; i++)
        tcm_free(runs[i]);
    atomic_store(phase, 1);
    while (atomic_load(phase) != 9) { /* busy: a page run every 100 us */
        void *p = tcm_malloc(300 << 10);
        CHECK(p != NULL);
        tcm_free(p);
        usleep(100);
    }
    tcm_shutdown();
    return 0;
}

static void test_busy_decay(void)
{
    tcm_test_daemon_t d;
    pid_t pid = start_idler(&d, (const char *[]){"decay_ms 300", "run_cache 0", NULL}, busy_heap);
    uint64_t before = tt_stat(&d, "bytes_committed"), now = before;
    for (int i = 0; i < 300 && now > (8u << 20); i++) {
        usleep(10000);
        now = tt_stat(&d, "bytes_committed");
    }
    printf("busy heap: %llu bytes committed after 40 MiB freed, %llu while it kept cutting and freeing\n",
           (unsigned long long)before, (unsigned long long)now);
    CHECK_GE(before, 40u << 20);
    CHECK_LE(now, 8u << 20);
    stop_idler(&d, pid);
}

/* A thread keeps what it freed in its bins; once it works on in other
 * classes (slow paths), its scavenges give back what sat unused: three
 * quarters of a class's low-water mark every decay_ms / TCM_DECAY_STEPS. */
static int scavenger(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    enum { N = 8000, CHURN = 5000 };
    static void *p[N];
    for (int i = 0; i < N; i++)
        CHECK((p[i] = tcm_malloc(1000)) != NULL);
    for (int i = 0; i < N; i++)
        tcm_free(p[i]);
    atomic_store(phase, 1); /* idle: nothing scavenges without a slow path */
    while (atomic_load(phase) != 2)
        usleep(1000);
    while (atomic_load(phase) != 9) { /* more than a bin of 48 B holds: misses and overflows */
        for (int i = 0; i < CHURN; i++)
            CHECK((p[i] = tcm_malloc(48)) != NULL);
        for (int i = 0; i < CHURN; i++)
            tcm_free(p[i]);
        usleep(1000);
    }
    tcm_shutdown();
    return 0;
}

static void test_scavenge(void)
{
    tcm_test_daemon_t d;
    pid_t pid = start_idler(&d, (const char *[]){"decay_ms 2000", NULL}, scavenger);
    uint64_t before = cached_by(&d, pid);
    atomic_store(phase, 2);
    uint64_t now = wait_cached_at_most(&d, pid, 1u << 20);
    printf("scavenge: %llu bytes cached after the frees, %llu while the thread works in another class\n",
           (unsigned long long)before, (unsigned long long)now);
    CHECK_GE(before, 2u << 20);
    CHECK_LE(now, 1u << 20);
    stop_idler(&d, pid);
}

/* Heap limit 96 MiB: process A caches what it freed and idles; process B
 * then gets all but A's thread caches before ENOMEM. */
static int grabber(void *arg)
{
    uint64_t *got = arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    for (;;) {
        void *p = tcm_malloc(4000);
        if (!p)
            break;
        *got += 4000;
    }
    CHECK_EQ(errno, ENOMEM);
    return 0;
}

static void test_full_heap_takes_back(void)
{
    tcm_test_daemon_t d;
    const char *args[] = {"--heap-size", "96M", NULL};
    tt_daemon_start(&d, args);
    socket_path = d.socket;
    char out[512];
    CHECK_EQ(tt_tcmctl(&d, "config set decay_ms 0", out, sizeof out), 0); /* only the heap-full request */
    atomic_store(phase, 0);
    pid_t a = tt_fork(trader, NULL);
    wait_phase(a, 1);
    uint64_t cached = cached_by(&d, a);
    uint64_t *got = mmap(NULL, sizeof *got, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    *got = 0;
    tt_wait_ok(tt_fork(grabber, got), 120000);
    uint64_t left = cached_by(&d, a);
    printf("full heap: A cached %llu bytes; B got %llu bytes of 96 MiB before ENOMEM; A still caches %llu\n",
           (unsigned long long)cached, (unsigned long long)*got, (unsigned long long)left);
    CHECK_GE(cached - left, 6u << 20);           /* A's transfer tier came back */
    CHECK_LE(left, 6u << 20);
    CHECK_GE(*got + left + (8u << 20), 96u << 20); /* all but A's bins and a little slack */
    CHECK_GE(tt_stat(&d, "flush_requests"), 1);
    atomic_store(phase, 9);
    tt_wait_ok(a, 60000);
    tt_daemon_stop(&d);
}

/* A process frees everything and exits; `tcmctl release` gives the pages
 * back, measured from the segment's blocks. */
static void test_release(void)
{
    tcm_test_daemon_t d;
    tt_daemon_start(&d, NULL);
    socket_path = d.socket;
    atomic_store(phase, 0);
    pid_t pid = tt_fork(workload, NULL);
    wait_phase(pid, 1);
    uint64_t peak = tt_stat(&d, "bytes_committed");
    CHECK_GE(peak, 100ull << 20);
    atomic_store(phase, 2);
    tt_wait_ok(pid, 60000);
    CHECK_EQ(tt_wait_stat(&d, "bytes_clients", 0, 5000), 0);

    char cmd[300], out[512];
    snprintf(cmd, sizeof cmd, "%s --socket %s --json release", TCMCTL_PATH, d.socket);
    FILE *f = popen(cmd, "r");
    CHECK(f && fgets(out, sizeof out, f));
    CHECK_EQ(pclose(f), 0);
    unsigned long long released = 0, before = 0, after = 0;
    CHECK_EQ(sscanf(out, "{\"released_bytes\":%llu,\"committed_before\":%llu,\"committed_after\":%llu}",
                    &released, &before, &after), 3);
    uint64_t now = tt_stat(&d, "bytes_committed");
    /* tcm's own figure of what it keeps on /dev/shm is what df sees there */
    char du[600], kb[64];
    snprintf(du, sizeof du, "du -sk --block-size=1 /dev/shm/tcm.%s.heap /dev/shm/tcm.%s.meta /dev/shm/tcm.%s.state "
             "$(ls /dev/shm/tcm.%s.ch.* 2>/dev/null) | awk '{s+=$1} END {print s}'", d.name, d.name, d.name, d.name);
    uint64_t shm = tt_stat(&d, "bytes_shm_committed");
    tt_run(du, kb, sizeof kb);
    printf("/dev/shm: tcm says %llu bytes, du says %s", (unsigned long long)shm, kb);
    CHECK_EQ(shm, strtoull(kb, NULL, 10));
    CHECK_EQ(shm, now + tt_stat(&d, "bytes_meta_committed") + tt_stat(&d, "bytes_state_committed") +
                      tt_stat(&d, "bytes_channels_committed"));
    printf("peak %llu, before release %llu, released %llu, after %llu (%.2f%% of peak)\n",
           (unsigned long long)peak, before, released, (unsigned long long)now, 100.0 * (double)now / (double)peak);
    CHECK_GT(released, 0);
    CHECK_LT(now * 20, peak); /* under 5% of peak */
    CHECK_GE(tt_stat(&d, "bytes_released"), released);

    /* and the heap is usable again afterwards: pages are committed anew */
    CHECK_EQ(tcm_init(d.socket), 0);
    void *p = tcm_malloc(5 << 20);
    CHECK(p != NULL);
    memset(p, 2, 5 << 20);
    tcm_free(p);
    tcm_shutdown();
    tt_daemon_stop(&d);
}

int main(void)
{
    phase = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(phase != MAP_FAILED);
    static const tt_case_t cases[] = {
        {"release", test_release},
        {"decay", test_decay},
        {"idle transfer tier", test_idle_transfer_tier},
        {"exited threads", test_exited_threads},
        {"release takes caches", test_release_takes_caches},
        {"busy decay", test_busy_decay},
        {"scavenge", test_scavenge},
        {"full heap takes back", test_full_heap_takes_back},
    };
    return tt_run_cases("memory", cases, sizeof cases / sizeof cases[0], 120000) != 0;
}
