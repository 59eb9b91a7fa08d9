/* tcmd restarts without losing the heap: killed with SIGKILL and started
 * again under load, stopped with SIGTERM while clients are attached (the
 * upgrade path), a client that dies while no tcmd runs, a tcmd that never
 * comes back, and segments that must not be adopted. Real processes, a real
 * daemon; each case runs in its own child (tt_run_cases), so a case that
 * hangs fails alone. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "tcm_layout.h"
#include "tcm_version.h"
#include "testutil.h"
#include "workload.h"

typedef struct shared {
    _Atomic int stop;
    _Atomic int ready;
} shared_t;

static shared_t *sh; /* for the single-purpose children below */
static wl_shared_t *wl;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* SIGKILL at work, five times: the clients wait, resume, and carry on
 * without one failed allocation; a root set before survives. */
static void test_kill_under_load(void)
{
    tcm_test_daemon_t d;
    tt_daemon_start(&d, NULL);
    char helper[256];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s produce restart_root >/dev/null", tt_path("tcm_test_helper", helper, sizeof helper));
    CHECK_EQ(system(cmd), 0);
    pid_t pids[2];
    wl_start(wl, 2, pids, 1000);
    for (int k = 0; k < 5; k++) {
        sleep_ms(30 + 20 * k);
        tt_daemon_kill(&d);
        tt_daemon_restart(&d, NULL, NULL);
        wl_wait_ops(wl, 500);
    }
    CHECK_EQ(tt_stat(&d, "restarts"), 5);
    CHECK_GE(tt_stat(&d, "clients_resumed"), 5);
    CHECK_EQ(tt_stat(&d, "validation_failures"), 0);
    tt_check_heap(&d);
    CHECK_EQ(wl_stop(wl, 2, pids), 0);
    snprintf(cmd, sizeof cmd, "%s consume restart_root >/dev/null", helper);
    CHECK_EQ(system(cmd), 0);
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0);
    CHECK_EQ(tt_stat(&d, "refused"), 0);
    CHECK_EQ(tt_stat(&d, "clients_died"), 0); /* they said Bye to the tcmd of the day */
    tt_check_heap(&d);
    tt_daemon_stop(&d);
}

/* One process, several threads, all needing tcmd when it goes: one of them
 * reconnects, the others wait for it, nobody fails. */
static _Atomic uint64_t *thread_ops, *thread_failures;

static void *page_runs(void *arg)
{
    (void)arg;
    while (!atomic_load(&sh->stop)) {
        void *p = tcm_malloc(300000 + (atomic_load(thread_ops) % 7) * 8192);
        if (!p) {
            atomic_fetch_add(thread_failures, 1);
            continue;
        }
        *(volatile char *)p = 1;
        tcm_free(p);
        atomic_fetch_add(thread_ops, 1);
    }
    return NULL;
}

static int threaded(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(NULL), 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, page_runs, NULL);
    atomic_store(&sh->ready, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    tcm_shutdown();
    return 0;
}

static void wait_thread_ops(uint64_t more)
{
    uint64_t want = atomic_load(thread_ops) + more, t0 = now_ms();
    while (atomic_load(thread_ops) < want) {
        CHECK_LT(now_ms() - t0, 60000);
        sleep_ms(2);
    }
}

static void test_threads(void)
{
    tcm_test_daemon_t d;
    tt_daemon_start(&d, NULL);
    char out[256];
    /* no transfer tier or page-run cache: every malloc and free needs tcmd */
    CHECK_EQ(tt_tcmctl(&d, "config set xfer_budget 0", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&d, "config set run_cache 0", out, sizeof out), 0);
    memset(sh, 0, sizeof *sh);
    thread_ops = mmap(NULL, 2 * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(thread_ops != MAP_FAILED);
    thread_failures = thread_ops + 1;
    pid_t pid = tt_fork(threaded, NULL);
    while (!atomic_load(&sh->ready))
        sleep_ms(2);
    wait_thread_ops(200);
    for (int k = 0; k < 3; k++) {
        tt_daemon_kill(&d);
        CHECK(tt_wait_threads_asleep(pid, 10000)); /* every thread waits for tcmd (or for the one reconnecting) */
        tt_daemon_restart(&d, NULL, NULL);
        wait_thread_ops(200);
    }
    atomic_store(&sh->stop, 1);
    tt_wait_ok(pid, 60000);
    CHECK_EQ(atomic_load(thread_failures), 0);
    CHECK_EQ(tt_stat(&d, "clients_resumed"), 3); /* once per restart, not once per thread */
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0);
    tt_daemon_stop(&d);
}

/* SIGTERM with clients attached leaves the heap and the socket; the next
 * tcmd adopts them (the upgrade path): no failed allocation. Once the clients
 * are gone, SIGTERM removes everything as before. */
static void test_upgrade(void)
{
    tcm_test_daemon_t d;
    tt_daemon_start(&d, NULL);
    pid_t pids[2];
    wl_start(wl, 2, pids, 1000);
    for (int k = 0; k < 3; k++) {
        int st = tt_terminate(d.pid, 10000);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        CHECK(tt_segment_exists(&d, "heap") && tt_segment_exists(&d, "meta") && tt_segment_exists(&d, "state"));
        CHECK_EQ(access(d.socket, F_OK), 0); /* new processes wait for the next tcmd */
        if (k == 0) { /* tcmctl says how to start one that adopts the heap */
            char out[2048], want[160];
            CHECK_EQ(tt_tcmctl(&d, "ping", out, sizeof out), 3);
            snprintf(want, sizeof want, "--name %s --heap-size %llu", d.name, 1ull << 30);
            if (!strstr(out, "a heap waits for its tcmd here") || !strstr(out, want)) {
                fprintf(stderr, "tcmctl ping with the heap waiting said: %s", out);
                abort();
            }
        }
        tt_daemon_restart(&d, NULL, NULL);
        wl_wait_ops(wl, 500);
    }
    tt_check_heap(&d);
    CHECK_EQ(wl_stop(wl, 2, pids), 0);
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "restarts"), 3);
    tt_daemon_stop(&d); /* checks the segments and the socket are gone */
    char hint[160];
    snprintf(hint, sizeof hint, "%s.heap", d.socket);
    CHECK(access(hint, F_OK) != 0); /* and the restart hint with them */
}

/* The heap the previous release left (state layout 14) is adopted and
 * migrated: its objects and roots are there, its history says where it
 * came from, and a second adoption migrates nothing. (The previous
 * release's own binaries under load: install.upgrade.) */
static void test_migration(void)
{
    tcm_test_daemon_t d;
    void *p = tt_previous_heap(&d, "before.upgrade", 5000, 0x5a);
    tt_daemon_restart(&d, NULL, NULL);
    char want[160];
    snprintf(want, sizeof want, "had layout 14 (left by tcmd 0.2.0 or older): migrated to layout %u",
             TCM_STATE_VERSION);
    CHECK(tt_log_contains(&d, want));
    tcm_state_hdr_t st;
    tt_state_read(&d, &st);
    CHECK_EQ(st.version, TCM_STATE_VERSION);
    CHECK_EQ(st.born_version, 14);
    CHECK(strcmp(st.served_by, TCM_VERSION_STRING) == 0);
    CHECK_EQ(tt_stat(&d, "heap_migrations"), TCM_STATE_VERSION - 14);
    CHECK_EQ(tcm_init(d.socket), 0);
    tt_take_root("before.upgrade", p, 5000, 0x5a);
    tcm_shutdown();
    tt_check_heap(&d);

    tt_daemon_kill(&d);
    unlink(d.log);
    tt_daemon_restart(&d, NULL, NULL);
    CHECK(tt_log_contains(&d, "adopting the heap")); /* and nothing to migrate: */
    CHECK_EQ(tt_stat(&d, "heap_migrations"), TCM_STATE_VERSION - 14);
    tt_daemon_stop(&d);
}

/* A client that dies while no tcmd runs is found by the next one (its
 * channel lock is free) and reclaimed like any other dead client. */
static int cacher(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(NULL), 0);
    void *p[1000];
    for (int i = 0; i < 1000; i++)
        CHECK((p[i] = tcm_malloc(1000)) != NULL);
    for (int i = 0; i < 1000; i++)
        tcm_free(p[i]);
    CHECK(tcm_malloc(100000) != NULL); /* still in use when it dies */
    atomic_store(&sh->ready, 1);
    for (;;)
        pause();
}

static void test_death_in_gap(void)
{
    tcm_test_daemon_t d;
    tt_daemon_start(&d, NULL);
    memset(sh, 0, sizeof *sh);
    pid_t pid = tt_fork(cacher, NULL);
    while (!atomic_load(&sh->ready))
        sleep_ms(5);
    uint64_t reclaimed = tt_stat(&d, "reclaimed_objects");
    tt_daemon_kill(&d);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    tt_daemon_restart(&d, NULL, NULL);
    CHECK_EQ(tt_stat(&d, "clients_attached"), 0);
    CHECK_EQ(tt_stat(&d, "clients_died"), 1);
    CHECK_GE(tt_stat(&d, "reclaimed_objects") - reclaimed, 500);
    CHECK_GE(tt_stat(&d, "bytes_orphaned"), 100000);
    CHECK_LE(tt_stat(&d, "bytes_orphaned"), 100000 + 100000 / 8);
    tt_check_heap(&d);

    /* and one that dies after the restart but before it needed tcmd again:
     * no connection tells us, its lock does */
    memset(sh, 0, sizeof *sh);
    pid = tt_fork(cacher, NULL);
    while (!atomic_load(&sh->ready))
        sleep_ms(5);
    tt_daemon_kill(&d);
    tt_daemon_restart(&d, NULL, NULL);
    CHECK_EQ(tt_stat(&d, "clients_attached"), 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "clients_died"), 2);
    tt_check_heap(&d);
    tt_daemon_stop(&d);
}

/* No tcmd comes back: the call says it waits, waits TCM_RECONNECT_TIMEOUT,
 * then NULL and ENOMEM with one message more, and later calls fail at once. */
static int abandoned(void *arg)
{
    const char *errfile = arg;
    int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    setenv("TCM_RECONNECT_TIMEOUT", "1", 1);
    CHECK_EQ(tcm_init(NULL), 0);
    void *keep = tcm_malloc(64);
    atomic_store(&sh->ready, 1);
    while (!atomic_load(&sh->stop))
        sleep_ms(5);
    uint64_t t0 = now_ms();
    errno = 0;
    CHECK(tcm_malloc(1 << 20) == NULL); /* a page run needs tcmd */
    CHECK_EQ(errno, ENOMEM);
    uint64_t waited = now_ms() - t0;
    CHECK_GE(waited, 900);
    CHECK_LT(waited, 10000);
    t0 = now_ms();
    for (int i = 0; i < 10; i++)
        CHECK(tcm_malloc(1 << 20) == NULL);
    CHECK_LT(now_ms() - t0, 500);
    tcm_free(keep); /* the hit path still works */
    return 0;
}

static void test_no_comeback(void)
{
    tcm_test_daemon_t d;
    tt_daemon_start(&d, NULL);
    memset(sh, 0, sizeof *sh);
    char errfile[128];
    snprintf(errfile, sizeof errfile, "/tmp/tcmtest-%d-abandoned.err", (int)getpid());
    pid_t pid = tt_fork(abandoned, errfile);
    while (!atomic_load(&sh->ready))
        sleep_ms(5);
    tt_daemon_kill(&d);
    atomic_store(&sh->stop, 1);
    tt_wait_ok(pid, 30000);
    FILE *f = fopen(errfile, "r");
    CHECK(f != NULL);
    char line[512];
    int lines = 0, waits = 0, gave_up = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        waits += strstr(line, "waiting up to 1 s") != NULL;
        gave_up += strstr(line, "did not come back") != NULL;
    }
    fclose(f);
    unlink(errfile);
    CHECK_EQ(waits, 1);
    CHECK_EQ(gave_up, 1);
    CHECK_EQ(lines, 2);
    tt_daemon_restart(&d, NULL, NULL);
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    tt_daemon_stop(&d);
}

static void patch_u32(const tcm_test_daemon_t *d, const char *suffix, off_t off, uint32_t v)
{
    char path[160];
    snprintf(path, sizeof path, "/dev/shm/tcm.%s.%s", d->name, suffix);
    int fd = open(path, O_RDWR);
    CHECK_GE(fd, 0);
    CHECK_EQ(pwrite(fd, &v, sizeof v, off), (ssize_t)sizeof v);
    close(fd);
}

static void expect_refused(tcm_test_daemon_t *d, const char *const *args, const char *want)
{
    char log[8192];
    int st = tt_daemon_run_fail(d, args, log, sizeof log);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !strstr(log, want)) {
        fprintf(stderr, "expected a refusal mentioning '%s'; status 0x%x, log:\n%s\n", want, st, log);
        abort();
    }
    /* nothing was deleted */
    CHECK(tt_segment_exists(d, "heap") && tt_segment_exists(d, "meta") && tt_segment_exists(d, "state"));
}

/* Segments of another size, base, thread count, layout version or owner are
 * refused with a message that says what differs; a heap segment a client
 * grew is cut back; --discard-heap replaces them. */
static void test_refusals(void)
{
    tcm_test_daemon_t d;
    const char *small[] = {"--heap-size", "64M", NULL};
    tt_daemon_start(&d, small);
    CHECK_EQ(tcm_init(d.socket), 0);
    void *p = tcm_malloc(1000);
    CHECK(p != NULL);
    CHECK_EQ(tcm_root_set("kept", p), 0);
    tcm_shutdown();
    tt_daemon_kill(&d);

    const char *bigger[] = {"--heap-size", "128M", NULL};
    expect_refused(&d, bigger, "--heap-size 128");
    const char *base[] = {"--heap-size", "64M", "--base", "0x7f0000000000", NULL};
    expect_refused(&d, base, "--base");
    const char *threads[] = {"--heap-size", "64M", "--max-threads", "8", NULL};
    expect_refused(&d, threads, "--max-threads 1024");
    char want[64];
    patch_u32(&d, "state", offsetof(tcm_state_hdr_t, version), TCM_STATE_VERSION_OLDEST - 1);
    snprintf(want, sizeof want, "layout version %u, this tcmd adopts %u to %u", TCM_STATE_VERSION_OLDEST - 1,
             TCM_STATE_VERSION_OLDEST, TCM_STATE_VERSION);
    expect_refused(&d, small, want);
    patch_u32(&d, "state", offsetof(tcm_state_hdr_t, version), TCM_STATE_VERSION + 1);
    snprintf(want, sizeof want, "layout version %u", TCM_STATE_VERSION + 1);
    expect_refused(&d, small, want);
    patch_u32(&d, "state", offsetof(tcm_state_hdr_t, version), TCM_STATE_VERSION);
    patch_u32(&d, "meta", offsetof(tcm_meta_hdr_t, version), TCM_ABI_VERSION + 1);
    snprintf(want, sizeof want, "layout version %u, this tcmd serves %u to %u", TCM_ABI_VERSION + 1,
             TCM_ABI_VERSION_OLDEST, TCM_ABI_VERSION);
    expect_refused(&d, small, want);
    patch_u32(&d, "meta", offsetof(tcm_meta_hdr_t, version), TCM_ABI_VERSION);
    if (geteuid() == 0) {
        char path[160];
        snprintf(path, sizeof path, "/dev/shm/tcm.%s.meta", d.name);
        CHECK_EQ(chown(path, 65534, (gid_t)-1), 0);
        expect_refused(&d, small, "owned by uid 65534");
        CHECK_EQ(chown(path, 0, (gid_t)-1), 0);
    }
    /* a heap segment shrunk is refused, with the exact sizes (the tree
     * before said "64.0M ... needs 64.0M"); one a client grew is cut back
     * and adopted (the tree before refused it: only --discard-heap, every
     * process's heap lost, started the service) */
    char heap_path[160], out[256];
    snprintf(heap_path, sizeof heap_path, "/dev/shm/tcm.%s.heap", d.name);
    CHECK_EQ(truncate(heap_path, (64 << 20) - 8192), 0);
    expect_refused(&d, small, "(67100672 bytes), a heap of --heap-size 64.0M needs 67108864 bytes");
    CHECK_EQ(truncate(heap_path, 64 << 20), 0);
    /* the metadata, which no client can write, is not cut back: larger, it is another heap's */
    char meta_path[160];
    struct stat ms;
    snprintf(meta_path, sizeof meta_path, "/dev/shm/tcm.%s.meta", d.name);
    CHECK_EQ(stat(meta_path, &ms), 0);
    CHECK_EQ(truncate(meta_path, ms.st_size + 8192), 0);
    expect_refused(&d, small, "a heap of --heap-size 64.0M needs");
    CHECK_EQ(truncate(meta_path, ms.st_size), 0);
    CHECK_EQ(truncate(heap_path, (64 << 20) + 8192), 0);
    tt_daemon_restart(&d, small, NULL);
    CHECK_EQ(tt_run("true", out, sizeof out), 0);
    struct stat hs;
    CHECK_EQ(stat(heap_path, &hs), 0);
    CHECK_EQ(hs.st_size, 64 << 20);
    CHECK(tt_log_contains(&d, "had grown to 67117056 bytes"));
    tt_check_heap(&d);
    tt_daemon_kill(&d);

    /* with the right options the heap is adopted, root and all */
    tt_daemon_restart(&d, small, NULL);
    CHECK_EQ(tt_stat(&d, "restarts"), 2);
    CHECK(tcm_root_get("kept") != NULL);
    tcm_shutdown();
    tt_daemon_kill(&d);
    const char *discard[] = {"--heap-size", "64M", "--discard-heap", NULL};
    tt_daemon_restart(&d, discard, NULL);
    CHECK_EQ(tt_stat(&d, "restarts"), 0);
    CHECK(tcm_root_get("kept") == NULL); /* a fresh heap */
    tcm_shutdown();
    tt_daemon_stop(&d);
}

int main(int argc, char **argv)
{
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    wl = wl_shared();
    static const tt_case_t cases[] = {
        {"kill_under_load", test_kill_under_load}, {"threads", test_threads}, {"upgrade", test_upgrade},
        {"death_in_gap", test_death_in_gap},       {"no_comeback", test_no_comeback},
        {"refusals", test_refusals},               {"migration", test_migration},
    };
    return tt_run_named_cases("restart", cases, sizeof cases / sizeof cases[0], 240000, argv + 1, argc - 1) != 0;
}
