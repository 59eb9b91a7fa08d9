/* The heap profile across processes: three processes allocate known
 * amounts from known functions; one hands a table of its objects to
 * another, which frees them; one is killed while it holds its objects.
 * tcmctl heap-profile --top must report each site's bytes within 10% (a
 * sampling interval of 4 KiB: the sites' estimates are within 2.5% at one
 * standard deviation, 1.8% for the 64-byte one), under the right pid, keep
 * the killed process's site and drop what was freed; the same after tcmd
 * is killed and restarted; the gzipped pprof profile is read by `go tool
 * pprof -top` where Go is installed. A client cannot sample a run it does
 * not hold, nor send more frames than a sample keeps; a user past its
 * share of the table gets its allocations, not their samples
 * (integration.access: the profile is the operator's). Runs freed before
 * tcmd took their samples leave no sample behind (small ones, and large
 * ones from the run cache), the run a thread
 * keeps for its next sample is never orphaned, and a sample waits for no
 * tcmd. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rawclient.h"
#include "tcm.h"
#include "testutil.h"

#define INTERVAL "4K"
#define A_N 6000
#define A_SIZE 1000u
#define SMALL_N 200000
#define SMALL_SIZE 64u
#define GIVEN_N 4000
#define GIVEN_SIZE 1000u
#define B_N 3000
#define B_SIZE 3000u
#define C_N 2000
#define C_SIZE 4000u

static const char *socket_path;
static _Atomic int *phase; /* 1: A allocated; 2: B took A's table; 3: C allocated; 9: all may exit; 10-14:
                              the later cases' */

static void wait_phase(int want)
{
    for (int i = 0; i < 60000 && atomic_load(phase) < want; i++)
        usleep(1000);
    CHECK_GE(atomic_load(phase), want);
}

/* The allocation sites: not inlined, and each keeps what it allocates
 * itself (no tail call, so each is a frame of its own). */
static void *volatile sink;
__attribute__((noinline)) static void site_a(void **out, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = tcm_malloc(A_SIZE);
    sink = out[0];
}

__attribute__((noinline)) static void site_small(void **out, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = tcm_malloc(SMALL_SIZE);
    sink = out[0];
}

__attribute__((noinline)) static void site_given(void **out, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = tcm_malloc(GIVEN_SIZE);
    sink = out[0];
}

__attribute__((noinline)) static void site_b(void **out, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = tcm_malloc(B_SIZE);
    sink = out[0];
}

__attribute__((noinline)) static void site_c(void **out, int n)
{
    for (int i = 0; i < n; i++)
        out[i] = tcm_malloc(C_SIZE);
    sink = out[0];
}

static void check_all(void **p, int n)
{
    for (int i = 0; i < n; i++)
        CHECK(p[i] != NULL);
}

static int proc_a(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    static void *a[A_N], *small[SMALL_N];
    void **given = tcm_malloc(GIVEN_N * sizeof *given); /* the table another process frees from */
    site_a(a, A_N);
    site_small(small, SMALL_N);
    site_given(given, GIVEN_N);
    check_all(a, A_N), check_all(small, SMALL_N), check_all(given, GIVEN_N);
    CHECK_EQ(tcm_root_set("profile.given", given), 0);
    atomic_store(phase, 1);
    wait_phase(9);
    return 0;
}

static int proc_b(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    wait_phase(1);
    void **given = tcm_root_get("profile.given");
    CHECK(given != NULL);
    for (int i = 0; i < GIVEN_N; i++)
        tcm_free(given[i]);
    static void *b[B_N];
    site_b(b, B_N);
    check_all(b, B_N);
    atomic_store(phase, 2);
    wait_phase(9);
    return 0;
}

static int proc_c(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    static void *c[C_N];
    site_c(c, C_N);
    check_all(c, C_N);
    atomic_store(phase, 3);
    for (;;)
        pause(); /* killed holding them */
}

/* A site's row of tcmctl --json heap-profile --top: bytes and the first pid. */
static bool site_row(const char *json, const char *func, double *bytes, unsigned *pid, unsigned *procs)
{
    char key[64];
    snprintf(key, sizeof key, "\"function\":\"%s", func);
    const char *at = json;
    /* the function or a copy the compiler made of it (site_b.constprop.0) */
    while ((at = strstr(at, key)) && at[strlen(key)] != '"' && at[strlen(key)] != '.')
        at++;
    if (!at)
        return false;
    const char *b = strstr(at, "\"bytes\":"), *p = strstr(at, "\"pids\":["), *n = strstr(at, "\"processes\":");
    CHECK(b && p && n);
    *bytes = strtod(b + 8, NULL);
    *pid = (unsigned)strtoul(p + 8, NULL, 10);
    *procs = (unsigned)strtoul(n + 12, NULL, 10);
    return true;
}

static void expect_site(const char *json, const char *func, double want, pid_t pid)
{
    double bytes;
    unsigned got_pid, procs;
    if (!site_row(json, func, &bytes, &got_pid, &procs)) {
        fprintf(stderr, "no site %s in: %s\n", func, json);
        CHECK(!"site missing");
    }
    printf("  %-11s %10.0f bytes (%+.1f%% of %.0f), pid %u\n", func, bytes, 100 * (bytes - want) / want, want,
           got_pid);
    CHECK(bytes >= want * 0.9 && bytes <= want * 1.1);
    CHECK_EQ(got_pid, (unsigned)pid);
    CHECK_EQ(procs, 1u);
}

static void check_profile(const tcm_test_daemon_t *d, pid_t a, pid_t b, pid_t c, const char *when)
{
    static char out[1 << 16];
    CHECK_EQ(tt_tcmctl(d, "--json heap-profile --top 50", out, sizeof out), 0);
    printf("%s:\n", when);
    expect_site(out, "site_a", (double)A_N * A_SIZE, a);
    expect_site(out, "site_small", (double)SMALL_N * SMALL_SIZE, a);
    expect_site(out, "site_b", (double)B_N * B_SIZE, b);
    expect_site(out, "site_c", (double)C_N * C_SIZE, c); /* killed: still held, still there */
    double bytes;
    unsigned pid, procs;
    CHECK(!site_row(out, "site_given", &bytes, &pid, &procs)); /* freed by b: gone */
}

/* go tool pprof reads the profile and finds site_b with its bytes. */
static void check_pprof(const tcm_test_daemon_t *d)
{
    char file[160], cmd[512], out[8192];
    tt_path("heap.pb.gz", file, sizeof file);
    snprintf(cmd, sizeof cmd, "heap-profile --output %s", file);
    CHECK_EQ(tt_tcmctl(d, cmd, out, sizeof out), 0);
    if (tt_run("command -v go", out, sizeof out) != 0) {
        printf("pprof: go is not installed (golang-go): the profile is checked by --top only\n");
        unlink(file);
        return;
    }
    snprintf(cmd, sizeof cmd, "go tool pprof -top -sample_index=inuse_space %s 2>&1", file);
    CHECK_EQ(tt_run(cmd, out, sizeof out), 0);
    const char *line = strstr(out, "site_b");
    CHECK(line != NULL);
    while (line > out && line[-1] != '\n')
        line--;
    double mb = strtod(line, NULL); /* flat, in MB: "8.58MB" */
    printf("pprof: %.60s\n", line);
    CHECK(strstr(line, "MB") != NULL);
    CHECK(mb * 1048576 >= B_N * B_SIZE * 0.9 && mb * 1048576 <= B_N * B_SIZE * 1.1);
    unlink(file);
}

/* A client may sample only a run it holds, with no more frames than a
 * sample keeps and a size its run has room for. */
static int sample(tt_raw_t *r, uint64_t run, uint64_t size, uint32_t nframes, uint64_t *kept)
{
    tcm_slot_t *s = &r->slots[0];
    s->op = TCM_OP_SAMPLE;
    s->arg = run;
    s->arg2 = size;
    s->cls = 2048;
    s->count = nframes;
    for (uint32_t i = 0; i < TCM_SAMPLE_FRAMES; i++)
        s->offs[i] = 0x400000 + i;
    int st = tt_raw_call(r, 0);
    *kept = s->result;
    return st;
}

static uint64_t others_run;

/* Another process samples a run it did not allocate: not kept. */
static int other(void *arg)
{
    tt_raw_t r;
    uint64_t kept;
    tt_raw_attach(&r, ((const tcm_test_daemon_t *)arg)->socket);
    CHECK_EQ(sample(&r, others_run, 100, 2, &kept), TCM_ST_OK);
    CHECK_EQ(kept, 0u);
    return 0;
}

/* Another process frees a run whose SAMPLE its allocator has not had
 * served yet (each free comes through its own process's ring). */
static int freer(void *arg)
{
    tt_raw_t r;
    tt_raw_attach(&r, ((const tcm_test_daemon_t *)arg)->socket);
    r.slots[0].op = TCM_OP_FREE_PAGES, r.slots[0].arg = others_run;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_OK);
    return 0;
}

/* A sample that comes after its object's free is not kept, and is no
 * refused request: the race is the allocator's, not a lie. */
static void late_sample(const tcm_test_daemon_t *d, tt_raw_t *mine)
{
    tcm_slot_t *s = &mine->slots[0];
    s->op = TCM_OP_ALLOC_PAGES, s->arg = 1, s->arg2 = 1, s->cls = TCM_ALLOC_SAMPLED;
    CHECK_EQ(tt_raw_call(mine, 0), TCM_ST_OK);
    others_run = s->result;
    tt_wait_ok(tt_fork(freer, (void *)d), 10000);
    uint64_t kept, refused = tt_stat(d, "refused"), not_kept = tt_stat(d, "profile_samples_refused");
    CHECK_EQ(sample(mine, others_run, 100, 2, &kept), TCM_ST_OK);
    CHECK_EQ(kept, 0u);
    CHECK_EQ(tt_stat(d, "refused"), refused);
    CHECK_EQ(tt_stat(d, "profile_samples_refused"), not_kept + 1);
    printf("a sample after its object's free in another process: not kept, not refused\n");
}

static int forger(void *arg)
{
    const tcm_test_daemon_t *d = arg;
    tt_raw_t mine;
    tt_raw_attach(&mine, d->socket);
    tcm_slot_t *s = &mine.slots[0];
    s->op = TCM_OP_ALLOC_PAGES, s->arg = 1, s->arg2 = 1;
    CHECK_EQ(tt_raw_call(&mine, 0), TCM_ST_OK);
    uint64_t run = s->result, kept, refused = tt_stat(d, "refused"), live = tt_stat(d, "profile_samples");
    others_run = run;
    tt_wait_ok(tt_fork(other, (void *)d), 10000); /* not its run */
    CHECK_EQ(sample(&mine, run + 16, 100, 2, &kept), TCM_ST_NOT_OBJECT);
    CHECK_EQ(sample(&mine, run, 100, TCM_SAMPLE_FRAMES + 1, &kept), TCM_ST_BAD_COUNT);
    CHECK_EQ(sample(&mine, run, TCM_PAGE_SIZE + 1, 2, &kept), TCM_ST_BAD_COUNT);
    CHECK_EQ(tt_stat(d, "refused"), refused + 3);
    CHECK_EQ(sample(&mine, run, 100, 2, &kept), TCM_ST_OK);
    CHECK_EQ(kept, 1u);
    CHECK_EQ(sample(&mine, run, 100, 2, &kept), TCM_ST_OK);
    CHECK_EQ(kept, 0u); /* sampled already */
    CHECK_EQ(tt_stat(d, "profile_samples"), live + 1);
    s->op = TCM_OP_FREE_PAGES, s->arg = run;
    CHECK_EQ(tt_raw_call(&mine, 0), TCM_ST_OK);
    CHECK_EQ(tt_stat(d, "profile_samples"), live); /* its free drops it */
    late_sample(d, &mine);
    printf("forgery: another's run, a run's inside, too many frames, too large a size: refused\n");
    fflush(stdout);
    return 0;
}

/* A user's share of the sample table: past a quarter of it, samples are
 * not kept, and the allocations are served all the same. */
static int flooder(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    static void *p[TCM_SAMPLES / 4 + 1000];
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        CHECK((p[i] = tcm_malloc(16)) != NULL);
    atomic_store(phase, 10);
    wait_phase(11);
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        tcm_free(p[i]);
    return 0;
}

static void check_share(const tcm_test_daemon_t *d)
{
    char out[256];
    CHECK_EQ(tt_tcmctl(d, "config set profile_sample 1", out, sizeof out), 0);
    uint64_t refused = tt_stat(d, "profile_samples_refused");
    pid_t f = tt_fork(flooder, NULL);
    wait_phase(10);
    uint64_t live = tt_stat(d, "profile_samples"), now_refused = tt_stat(d, "profile_samples_refused");
    printf("share: %llu samples live (a user's share: %u), %llu refused\n", (unsigned long long)live,
           TCM_SAMPLES / 4, (unsigned long long)(now_refused - refused));
    CHECK_LE(live, TCM_SAMPLES / 4 + 1); /* (+1: the forger's run, freed since, is not a sample) */
    CHECK_GE(now_refused - refused, 1000u);
    atomic_store(phase, 11);
    tt_wait_ok(f, 30000);
    CHECK_EQ(tt_tcmctl(d, "config set profile_sample " INTERVAL, out, sizeof out), 0);
}

/* Every allocation sampled and freed at once: each run's free reaches tcmd
 * after its SAMPLE, which the thread posted without waking tcmd, so no
 * sample outlives its object, and no run went to the run cache. */
static int churner(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    for (int i = 0; i < 2000; i++) {
        char *p = tcm_malloc(64 + (size_t)i % 3000);
        CHECK(p != NULL);
        p[0] = 1;
        tcm_free(p);
    }
    atomic_store(phase, 12);
    wait_phase(13);
    return 0;
}

/* Runs of 1 MiB, about half of them sampled: a run freed unsampled goes
 * to the process's run cache, and a sample that takes it from there marks
 * it with a SAMPLE it waits for, so that its free reaches tcmd too. */
static int large_churner(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    for (int i = 0; i < 400; i++) {
        char *p = tcm_malloc(1u << 20);
        CHECK(p != NULL);
        p[0] = 1;
        tcm_free(p);
    }
    atomic_store(phase, 21); /* alive, its run cache holding what it freed unsampled */
    wait_phase(22);
    return 0;
}

/* A churner run at interval: once it reaches its phase (alive), after a
 * turn of the heap thread, at least min_taken samples were taken and none
 * outlives its object; then it may go on to the next phase and exit. */
static void churn_once(const tcm_test_daemon_t *d, const char *name, const char *interval, int (*fn)(void *),
                       int reached, uint64_t min_taken)
{
    char out[4096], cmd[64];
    snprintf(cmd, sizeof cmd, "config set profile_sample %s", interval);
    CHECK_EQ(tt_tcmctl(d, cmd, out, sizeof out), 0);
    uint64_t live = tt_stat(d, "profile_samples"), taken = tt_stat(d, "profile_samples_taken");
    pid_t f = tt_fork(fn, NULL);
    wait_phase(reached);
    CHECK_EQ(tt_tcmctl(d, "heap-profile --top 5", out, sizeof out), 0); /* a turn of the heap thread first */
    printf("%s: %llu samples taken, %llu live after\n", name,
           (unsigned long long)(tt_stat(d, "profile_samples_taken") - taken),
           (unsigned long long)tt_stat(d, "profile_samples"));
    CHECK_GE(tt_stat(d, "profile_samples_taken") - taken, min_taken);
    CHECK_EQ(tt_stat(d, "profile_samples"), live);
    atomic_store(phase, reached + 1);
    tt_wait_ok(f, 30000);
}

/* The small churn's runs come in stocks (TCM_ALLOC_SAMPLE_RUNS): a wake of
 * tcmd serves several samples, not one (a single run asked for after each
 * sample read as many ALLOC_PAGES as samples, or more). */
static void check_churn(const tcm_test_daemon_t *d)
{
    char out[4096];
    uint64_t asks = tt_stat(d, "requests_alloc_pages"), taken = tt_stat(d, "profile_samples_taken");
    churn_once(d, "churn", "1", churner, 12, 1990);
    asks = tt_stat(d, "requests_alloc_pages") - asks;
    taken = tt_stat(d, "profile_samples_taken") - taken;
    printf("churn: %llu page-run requests for %llu samples\n", (unsigned long long)asks, (unsigned long long)taken);
    CHECK_LE(asks * 2, taken); /* at most two a stock of eight: it, and a run waited for while it came */
    /* with no run cache a stock's spare runs would go back at once, a
     * FREE_PAGES each beside the sampled runs' own: none is asked for */
    CHECK_EQ(tt_tcmctl(d, "config set run_cache 0", out, sizeof out), 0);
    uint64_t frees = tt_stat(d, "requests_free_pages");
    taken = tt_stat(d, "profile_samples_taken");
    atomic_store(phase, 11);
    churn_once(d, "churn, no run cache", "1", churner, 12, 1990);
    frees = tt_stat(d, "requests_free_pages") - frees;
    taken = tt_stat(d, "profile_samples_taken") - taken;
    printf("churn, no run cache: %llu runs freed for %llu samples\n", (unsigned long long)frees,
           (unsigned long long)taken);
    CHECK_LE(frees, taken + taken / 10);
    CHECK_EQ(tt_tcmctl(d, "config set run_cache " TCM_DEFAULT_RUN_CACHE, out, sizeof out), 0);
    churn_once(d, "large churn", "1536K", large_churner, 21, 100);
    atomic_store(phase, 13); /* the later cases' phases count on from the churn's */
    CHECK_EQ(tt_tcmctl(d, "config set profile_sample " INTERVAL, out, sizeof out), 0);
}

/* A sample waits for nobody: with tcmd stopped (SIGSTOP: alive, so its
 * clients wait for it), a thread whose cache holds what it allocates goes
 * on allocating at a 1-byte sampling interval, its samples owed; once tcmd
 * runs again they are taken. (A rate that never lengthens the interval:
 * every malloc is a sample's point. Under profile_rate 0 a sample waits
 * for its run. No decay: the thread's scavenger hands its idle objects
 * back and waits for the answer.) */
#define STOPPED_PAIRS 200000

static int stopped_allocator(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < STOPPED_PAIRS; i++) {
            char *p = tcm_malloc(SMALL_SIZE);
            CHECK(p != NULL);
            p[0] = 1;
            tcm_free(p);
        }
        atomic_store(phase, 15 + 2 * round); /* 15: warm; 17: done with tcmd stopped; 19: done after */
        wait_phase(16 + 2 * round);
    }
    return 0;
}

static void check_stopped_daemon(const tcm_test_daemon_t *d)
{
    char out[4096];
    CHECK_EQ(tt_tcmctl(d, "config set profile_rate 1000000", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(d, "config set decay_ms 0", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(d, "config set profile_sample 1", out, sizeof out), 0);
    pid_t f = tt_fork(stopped_allocator, NULL);
    wait_phase(15);
    CHECK_EQ(tt_tcmctl(d, "heap-profile --top 1", out, sizeof out), 0); /* a turn: what it posted quietly is served */
    uint64_t taken = tt_stat(d, "profile_samples_taken");
    CHECK_EQ(kill(d->pid, SIGSTOP), 0);
    atomic_store(phase, 16);
    for (int i = 0; i < 10000 && atomic_load(phase) < 17; i++)
        usleep(1000);
    int reached = atomic_load(phase);
    CHECK_EQ(kill(d->pid, SIGCONT), 0);
    CHECK_GE(reached, 17); /* it did not wait for the stopped tcmd */
    CHECK_EQ(tt_tcmctl(d, "heap-profile --top 1", out, sizeof out), 0); /* tcmd served the run the sample owed waits for */
    atomic_store(phase, 18);
    wait_phase(19);
    CHECK_EQ(tt_tcmctl(d, "heap-profile --top 1", out, sizeof out), 0);
    uint64_t after = tt_stat(d, "profile_samples_taken") - taken;
    printf("stopped tcmd: %d pairs allocated while it was stopped, %llu samples taken in all\n", STOPPED_PAIRS,
           (unsigned long long)after);
    CHECK_GE(after, 1u); /* the owed one, once tcmd ran again */
    atomic_store(phase, 20);
    tt_wait_ok(f, 30000);
    CHECK_EQ(tt_tcmctl(d, "config set profile_sample " INTERVAL, out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(d, "config set profile_rate 0", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(d, "config set decay_ms " TCM_DEFAULT_DECAY_MS, out, sizeof out), 0);
}

/* A thread's run asked for ahead for its next sample goes back when the
 * thread exits, and to reclaim when its process is killed: threads that
 * come and go, and a process killed while its threads hold one, leave
 * nothing orphaned. */
static _Atomic int *waiting_threads;

static void *touch_and_go(void *arg)
{
    void *p = tcm_malloc(64);
    CHECK(p != NULL);
    tcm_free(p);
    return arg;
}

static void *touch_and_wait(void *arg)
{
    touch_and_go(arg);
    atomic_fetch_add(waiting_threads, 1);
    for (;;)
        pause();
    return arg;
}

static int comer(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    pthread_t t;
    for (int i = 0; i < 64; i++) {
        CHECK_EQ(pthread_create(&t, NULL, touch_and_go, NULL), 0);
        CHECK_EQ(pthread_join(t, NULL), 0);
    }
    for (int i = 0; i < 8; i++)
        CHECK_EQ(pthread_create(&t, NULL, touch_and_wait, NULL), 0);
    while (atomic_load(waiting_threads) < 8)
        usleep(1000);
    atomic_store(phase, 14);
    for (;;)
        pause();
}

static void check_threads_leave_nothing(const tcm_test_daemon_t *d)
{
    uint64_t orphaned = tt_stat(d, "bytes_orphaned"), attached = tt_stat(d, "clients_attached");
    pid_t p = tt_fork(comer, NULL);
    wait_phase(14);
    kill(p, SIGKILL);
    tt_wait(p, 10000);
    tt_wait_stat(d, "clients_attached", attached, 10000);
    CHECK_EQ(tt_stat(d, "bytes_orphaned"), orphaned);
    printf("threads: 64 came and went, 8 killed holding their next sample's run: nothing orphaned\n");
}

/* A process that samples nothing: its record is made at its first malloc
 * (the mappings posted then, served with its first refill). */
static int attacher(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    char *p = tcm_malloc(64);
    CHECK(p != NULL);
    tcm_free(p);
    wait_phase(1);
    return 0;
}

/* Its record goes as it leaves (no sample names it): processes that come
 * and go take one record between them. */
static void check_process_record(const tcm_test_daemon_t *d)
{
    uint64_t before = tt_stat(d, "profile_table_bytes"), want = before + sizeof(tcm_sample_proc_t), now = 0;
    for (int k = 0; k < 3; k++) {
        atomic_store(phase, 0);
        pid_t pid = tt_fork(attacher, NULL);
        for (int i = 0; i < 500 && (now = tt_stat(d, "profile_table_bytes")) < want; i++)
            usleep(10000);
        printf("process record: process %d: profile_table_bytes %llu -> %llu\n", k, (unsigned long long)before,
               (unsigned long long)now);
        CHECK_EQ(now, want);
        atomic_store(phase, 1);
        tt_wait_ok(pid, 10000);
        tt_wait_stat(d, "clients_attached", 0, 10000);
    }
    CHECK_EQ(tt_stat(d, "profile_samples"), 0);
    atomic_store(phase, 0);
}

/* A tcmd that turns sampling on backs, while idle, the record the next
 * new process takes and the next sample's entry (a process's first MAPS
 * had backed its record on the heap thread, ~100 us): the state segment
 * grows by them with no process attached. */
static void check_backed_ahead(void)
{
    tcm_test_daemon_t d;
    const char *args[] = {"--profile-sample", "0", NULL};
    tt_daemon_start(&d, args);
    socket_path = d.socket;
    uint64_t off = tt_stat(&d, "bytes_state_committed"), want = off + sizeof(tcm_sample_proc_t) + 4096, on = 0;
    char out[256];
    CHECK_EQ(tt_tcmctl(&d, "config set profile_sample 2M", out, sizeof out), 0);
    for (int i = 0; i < 500 && (on = tt_stat(&d, "bytes_state_committed")) < want; i++)
        usleep(10000);
    printf("backed ahead: state committed %llu -> %llu bytes as sampling turned on\n", (unsigned long long)off,
           (unsigned long long)on);
    CHECK_GE(on, want);
    CHECK_EQ(tt_stat(&d, "profile_table_bytes"), 0); /* backed, not used */
    check_process_record(&d);
    tt_daemon_stop(&d);
}

int main(void)
{
    phase = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(phase != MAP_FAILED);
    waiting_threads = phase + 1;
    check_backed_ahead();
    tcm_test_daemon_t d;
    /* no limit on a thread's samples a second: these bursts would get few */
    const char *args[] = {"--profile-sample", INTERVAL, "--profile-rate", "0", NULL};
    tt_daemon_start(&d, args);
    socket_path = d.socket;
    pid_t a = tt_fork(proc_a, NULL);
    pid_t b = tt_fork(proc_b, NULL);
    wait_phase(2);
    pid_t c = tt_fork(proc_c, NULL);
    wait_phase(3);
    kill(c, SIGKILL);
    int st = tt_wait(c, 10000);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    tt_wait_stat(&d, "clients_attached", 2, 10000);
    check_profile(&d, a, b, c, "three processes, one killed");
    check_pprof(&d);

    tt_daemon_kill(&d);
    tt_daemon_restart(&d, args, NULL);
    check_profile(&d, a, b, c, "after tcmd was killed and restarted");
    tt_wait_ok(tt_fork(forger, &d), 20000); /* a process of its own: it detaches when it exits */

    check_share(&d);
    check_churn(&d);
    check_threads_leave_nothing(&d);
    check_stopped_daemon(&d);
    atomic_store(phase, 9);
    tt_wait_ok(a, 10000);
    tt_wait_ok(b, 10000);
    tt_check_heap(&d);
    tt_daemon_stop(&d);
    printf("ok\n");
    return 0;
}
