/* Crash points that used to leave holes (issue 20), each killing tcmd where
 * the hole was:
 *   - a ROOT_SET inside the root's seqlock write (sequence left odd): the
 *     next tcmd writes the root again from the request intent, the client's
 *     call returns, tcm_root_get finds the value and nothing spins;
 *   - a page run answered to a client that dies before it takes the answer
 *     (ALLOC_PAGES slot left DONE): reclaimed, whether the client dies under
 *     a running tcmd, while no tcmd runs, or the reclaim itself is killed;
 *   - a stock of sample runs (TCM_ALLOC_SAMPLE_RUNS) answered and never
 *     taken, and one whose tcmd is killed between two of its runs (the next
 *     one answers with the runs made);
 *   - a page run committed in steps across turns (DESIGN.md,
 *     "Continuations"): the client killed between two steps (the run goes
 *     back free, the whole-heap check passes meanwhile and after), tcmd
 *     killed between two (the next one finds its pages free and answers
 *     the request, still posted);
 *   - the migration of a heap the previous release left, killed before its
 *     version store: the next tcmd migrates it again.
 * Each case has a daemon of its own. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "frame.h"
#include "prim.h"
#include "ring.h"
#include "tcm.h"
#include "tcm_layout.h"
#include "rawclient.h"
#include "testutil.h"

#define RUN_PAGES 40 /* the page run a raw client asks for */

static tcm_test_daemon_t d;

static void start_armed(const char *point_hit)
{
    char spec[96];
    snprintf(spec, sizeof spec, "TCM_TEST_CRASH_AT=%s", point_hit);
    const char *env[] = {spec, NULL};
    tt_daemon_start_env(&d, NULL, env);
}

/* Wait for the armed point to kill tcmd, then start the next one. */
static void killed_and_restarted(void)
{
    int st = tt_daemon_wait_exit(&d, 60000);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    tt_daemon_restart(&d, NULL, NULL);
}

static void log_has(const char *what)
{
    CHECK(tt_log_contains(&d, what));
}

/* ---- the root seqlock ---- */

typedef struct shared {
    uint64_t first, second; /* offsets of the two objects the setter allocated */
} shared_t;

static shared_t *shared;
static bool overwrite;

/* Sets root crash.root (to a first object, then, when overwrite, to a
 * second one): the armed point kills tcmd inside the last write, and the
 * call returns once the next tcmd has redone it. */
static int root_setter(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(NULL), 0);
    void *p = tcm_malloc(64), *q = tcm_malloc(64);
    CHECK(p && q);
    shared->first = tcm_to_offset(p);
    shared->second = tcm_to_offset(q);
    if (overwrite)
        CHECK_EQ(tcm_root_set("crash.root", p), 0);
    void *want = overwrite ? q : p;
    CHECK_EQ(tcm_root_set("crash.root", want), 0); /* tcmd dies in here */
    CHECK(tcm_root_get("crash.root") == want);
    tcm_shutdown(); /* p and q stay allocated: the parent frees them */
    return 0;
}

static void root_case(const char *point_hit, bool over)
{
    shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(shared != MAP_FAILED);
    overwrite = over;
    start_armed(point_hit);
    pid_t pid = tt_fork(root_setter, NULL);
    killed_and_restarted();
    tt_wait_ok(pid, 60000);
    log_has("half-written (odd sequence): written again from the request");
    log_has("validator: consistent");
    uint64_t want = over ? shared->second : shared->first;

    /* another process finds it; tcmctl lists it; the validator reads it */
    char out[4096], line[128];
    CHECK_EQ(tt_tcmctl(&d, "roots", out, sizeof out), 0);
    snprintf(line, sizeof line, "0x%llx", (unsigned long long)want);
    CHECK(strstr(out, "crash.root") != NULL && strstr(out, line) != NULL);
    tt_check_heap(&d);
    CHECK_EQ(tcm_init(d.socket), 0);
    CHECK(tcm_root_get("crash.root") == tcm_from_offset(want));
    CHECK_EQ(tcm_root_set("crash.root", NULL), 0); /* and the next write of it works */
    CHECK(tcm_root_get("crash.root") == NULL);
    tcm_free(tcm_from_offset(shared->first));
    tcm_free(tcm_from_offset(shared->second));
    tcm_shutdown();
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0);
    tt_daemon_stop(&d);
}

/* an existing root rewritten, killed after the sequence went odd */
static void test_root_odd(void)
{
    root_case("root_odd:2", true);
}

/* a new root, killed after its name, offset and used were stored */
static void test_root_data(void)
{
    root_case("root_data:1", false);
}

/* ---- a page run answered but never taken ---- */

/* What a raw client asks for: a run of RUN_PAGES, or a stock of sample
 * runs (TCM_ALLOC_SAMPLE_RUNS), of which it expects `made`. */
typedef struct ask {
    uint32_t cls, count, made;
} ask_t;
static const ask_t one_run = {0, 0, 1};
static const ask_t full_stock = {TCM_ALLOC_SAMPLE_RUNS, TCM_SAMPLE_RUNS_MAX, TCM_SAMPLE_RUNS_MAX};
#define STOCK_CUT 3 /* the stock's run after which tcmd is killed */
static const ask_t cut_stock = {TCM_ALLOC_SAMPLE_RUNS, TCM_SAMPLE_RUNS_MAX, STOCK_CUT};

/* Attach, ask, wait for the answer and stop there (SIGSTOP) before taking
 * it; the parent kills it. */
static int unread_run(void *arg)
{
    const ask_t *ask = arg;
    tt_raw_t r;
    tt_raw_attach(&r, d.socket);
    uint32_t idx = r.lay.max_threads; /* the spare slot, backed at attach */
    tcm_slot_t *s = &r.slots[idx];
    s->op = TCM_OP_ALLOC_PAGES;
    s->arg = ask->cls ? 1 : RUN_PAGES;
    s->arg2 = 1;
    s->cls = ask->cls;
    s->count = ask->count;
    s->req_seq = 1;
    atomic_store(&s->state, TCM_SLOT_POSTED);
    CHECK(tcm__ring_push(r.ring, r.lay.ring_cap, idx));
    tcm__bell_ring((_Atomic uint32_t *)&r.meta->heap_sleeping, r.bell);
    while (atomic_load(&s->state) != TCM_SLOT_DONE) /* no waiting flag: tcmd does not wake it, hence slices */
        tcm__wait(&s->state, TCM_SLOT_POSTED, 1000000);
    CHECK_EQ(s->status, TCM_ST_OK);
    if (ask->cls) { /* that many runs of a page, each its own (the parent counts their bytes) */
        CHECK_EQ(s->nresult, ask->made);
        CHECK_EQ(s->result, s->offs[0]);
        for (uint32_t i = 0; i < s->nresult; i++) {
            uint64_t off = s->offs[i];
            CHECK(off && off % TCM_PAGE_SIZE == 0);
            for (uint32_t j = 0; j < i; j++)
                CHECK(s->offs[j] != off);
        }
    }
    raise(SIGSTOP); /* answered, not taken: the slot stays DONE */
    return 0;
}

/* The client is stopped with its answer unread. */
static pid_t stopped_client(const ask_t *ask)
{
    pid_t pid = tt_fork(unread_run, (void *)ask);
    int st;
    CHECK_EQ(waitpid(pid, &st, WUNTRACED), pid);
    CHECK(WIFSTOPPED(st));
    return pid;
}

static void kill_client(pid_t pid)
{
    int st;
    CHECK_EQ(kill(pid, SIGKILL), 0);
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

static void all_back(void)
{
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0);
    CHECK_EQ(tt_stat(&d, "bytes_orphaned"), 0);
    CHECK_EQ(tt_stat(&d, "refused"), 0);
    tt_check_heap(&d);
    /* the run is free: a client can have the same run again */
    CHECK_EQ(tcm_init(d.socket), 0);
    void *p = tcm_malloc((size_t)RUN_PAGES * TCM_PAGE_SIZE);
    CHECK(p != NULL);
    tcm_free(p);
    tcm_shutdown();
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    tt_daemon_stop(&d);
}

/* tcmd runs throughout: the client dies and is reclaimed */
static void test_unread_run_live(void)
{
    tt_daemon_start(&d, NULL);
    pid_t pid = stopped_client(&one_run);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), (uint64_t)RUN_PAGES * TCM_PAGE_SIZE); /* handed out */
    kill_client(pid);
    all_back();
}

/* tcmd killed just after answering; the client dies while none runs and the
 * next tcmd reclaims it */
static void test_unread_run_gap(void)
{
    start_armed("answered:1"); /* the raw client's request is the first */
    pid_t pid = stopped_client(&one_run);
    int st = tt_daemon_wait_exit(&d, 60000);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    kill_client(pid);
    tt_daemon_restart(&d, NULL, NULL);
    log_has("died while no tcmd was running");
    log_has("validator: consistent");
    all_back();
}

/* the reclaim of the run killed after the run was freed: the next tcmd
 * reclaims the client again and finds the run free */
static void test_unread_run_reclaim_killed(void)
{
    start_armed("reclaim_run:1");
    pid_t pid = stopped_client(&one_run);
    kill_client(pid);
    killed_and_restarted();
    log_has("validator: consistent");
    all_back();
}

/* A stock of sample runs answered, the client killed before taking it:
 * every run of it reclaimed */
static void test_unread_stock_live(void)
{
    tt_daemon_start(&d, NULL);
    pid_t pid = stopped_client(&full_stock);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), (uint64_t)TCM_SAMPLE_RUNS_MAX * TCM_PAGE_SIZE);
    kill_client(pid);
    all_back();
}

/* tcmd killed between two runs of a stock: the next one answers the
 * request with the runs made, and reclaims them with the client */
static void test_stock_cut(void)
{
    char spec[32];
    snprintf(spec, sizeof spec, "sample_run:%d", STOCK_CUT);
    start_armed(spec);
    pid_t pid = tt_fork(unread_run, (void *)&cut_stock);
    int st = tt_daemon_wait_exit(&d, 60000);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    tt_daemon_restart(&d, NULL, NULL);
    CHECK_EQ(waitpid(pid, &st, WUNTRACED), pid); /* the client checked the answer, then stopped */
    CHECK(WIFSTOPPED(st));
    log_has("validator: consistent");
    CHECK_EQ(tt_stat(&d, "bytes_clients"), (uint64_t)STOCK_CUT * TCM_PAGE_SIZE);
    kill_client(pid);
    all_back();
}

/* ---- a page run committed in steps ---- */

#define BIG_PAGES ((7ull << 29) / TCM_PAGE_SIZE) /* 3.5 GiB: ~420 ms of fallocate, 1 792 steps */
static const char *const big_heap[] = {"--heap-size", "4G", NULL};
static _Atomic int *big_answered; /* shared with the child: its slot is DONE */

/* Posts an ALLOC_PAGES of BIG_PAGES and waits for whatever comes: the
 * parent kills it meanwhile. */
static int big_run_waiter(void *arg)
{
    (void)arg;
    tt_raw_t r;
    tt_raw_attach(&r, d.socket);
    uint32_t idx = r.lay.max_threads;
    tcm_slot_t *s = &r.slots[idx];
    s->op = TCM_OP_ALLOC_PAGES;
    s->arg = BIG_PAGES;
    s->arg2 = 1;
    s->req_seq = 1;
    atomic_store(&s->state, TCM_SLOT_POSTED);
    CHECK(tcm__ring_push(r.ring, r.lay.ring_cap, idx));
    tcm__bell_ring((_Atomic uint32_t *)&r.meta->heap_sleeping, r.bell);
    while (atomic_load(&s->state) != TCM_SLOT_DONE)
        usleep(100);
    atomic_store(big_answered, 1);
    for (;;)
        pause();
    return 0;
}

/* A raw client posts the big run; returns once the run is taken at its
 * first step (from above top, or from the free runs), which is long before
 * its last step hands it out. */
static pid_t big_run_posted(void)
{
    const uint64_t run = BIG_PAGES << TCM_PAGE_SHIFT;
    atomic_store(big_answered, 0);
    uint64_t top = tt_stat(&d, "bytes_top"), free = tt_stat(&d, "bytes_pageheap_free");
    pid_t pid = tt_fork(big_run_waiter, NULL);
    uint64_t t0 = tcm__now_ns();
    /* one figure a poll: a sanitizer's tcmctl is slow to start */
    while (free >= run ? tt_stat(&d, "bytes_pageheap_free") + run > free : tt_stat(&d, "bytes_top") < top + run) {
        CHECK_LT(tcm__now_ns() - t0, 10000000000ull);
        usleep(200);
    }
    return pid;
}

static void test_steps_client_killed(void)
{
    big_answered = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(big_answered != MAP_FAILED);
    tt_daemon_start(&d, big_heap);
    /* the whole-heap check while a run is in transit: it is nobody's loss
     * (whether the steps outran the check is said, not checked) */
    pid_t pid = big_run_posted();
    tt_check_heap(&d);
    printf("      the check ran %s the run was handed out\n", atomic_load(big_answered) ? "after" : "before");
    kill_client(pid);
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0);
    /* the client dies while tcmd is stopped with the run still in transit
     * (punched first, so that it needs committing again) */
    char out[512];
    CHECK_EQ(tt_tcmctl(&d, "release", out, sizeof out), 0);
    pid = big_run_posted();
    CHECK(tt_stop(d.pid, 5000));
    usleep(20000); /* an answer written before the stop reaches the flag */
    CHECK_EQ(atomic_load(big_answered), 0); /* else the steps outran the poll: a faster box needs a bigger run */
    kill_client(pid);
    CHECK_EQ(kill(d.pid, SIGCONT), 0);
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    log_has("in transit");
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0);
    tt_check_heap(&d);
    /* no page lost: the whole run can be had again */
    CHECK_EQ(tcm_init(d.socket), 0);
    void *p = tcm_malloc(BIG_PAGES * TCM_PAGE_SIZE);
    CHECK(p != NULL);
    tcm_free(p);
    tcm_shutdown();
    all_back();
}

/* A libtcm client whose 256 MiB malloc rides through a restart */
static int big_malloc(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(d.socket), 0);
    size_t n = 256u << 20;
    char *p = tcm_malloc(n);
    CHECK(p != NULL);
    p[0] = 1, p[n - 1] = 2;
    tcm_free(p);
    tcm_shutdown();
    return 0;
}

static void test_steps_tcmd_killed(void)
{
    const char *env[] = {"TCM_TEST_CRASH_AT=pages_step:20", NULL}; /* 40 MiB of 256 committed */
    tt_daemon_start_env(&d, big_heap, env);
    pid_t pid = tt_fork(big_malloc, NULL);
    int st = tt_daemon_wait_exit(&d, 60000);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    tt_daemon_restart(&d, big_heap, NULL);
    tt_wait_ok(pid, 60000); /* answered by the next tcmd */
    log_has("validator: consistent");
    all_back();
}

/* ---- a migration (daemon/migrate.c) ---- */

/* tcmd killed inside the migration of a heap the previous release left:
 * the state keeps the old version, and the next tcmd migrates it and
 * serves the heap with its root. */
static void test_migration_killed(void)
{
    void *p = tt_previous_heap(&d, "migrated", 3000, 0x3c);
    const char *env[] = {"TCM_TEST_CRASH_AT=migrate:1", NULL};
    char out[4096];
    int st = tt_daemon_run_fail_env(&d, NULL, env, out, sizeof out);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    tcm_state_hdr_t hdr;
    tt_state_read(&d, &hdr);
    CHECK_EQ(hdr.version, 14);
    tt_daemon_restart(&d, NULL, NULL);
    log_has("had layout 14 (left by tcmd 0.2.0 or older): migrated");
    tt_state_read(&d, &hdr);
    CHECK_EQ(hdr.version, TCM_STATE_VERSION);
    CHECK_EQ(hdr.born_version, 14);
    CHECK_EQ(tcm_init(d.socket), 0);
    tt_take_root("migrated", p, 3000, 0x3c);
    tcm_shutdown();
    tt_daemon_stop(&d);
}

int main(void)
{
    static const tt_case_t cases[] = {
        {"root write killed after the odd store", test_root_odd},
        {"root write killed before the even store", test_root_data},
        {"page run answered, client killed before taking it", test_unread_run_live},
        {"page run answered, tcmd killed, client dead in the gap", test_unread_run_gap},
        {"reclaim of an unread page run killed", test_unread_run_reclaim_killed},
        {"stock of sample runs answered, client killed before taking it", test_unread_stock_live},
        {"stock of sample runs, tcmd killed between two of its runs", test_stock_cut},
        {"page run in transit, client killed between two steps", test_steps_client_killed},
        {"page run in transit, tcmd killed between two steps", test_steps_tcmd_killed},
        {"state migration killed between its stores", test_migration_killed},
    };
    int failed = tt_run_cases("crashrepair", cases, sizeof cases / sizeof cases[0], 120000);
    return failed != 0;
}
