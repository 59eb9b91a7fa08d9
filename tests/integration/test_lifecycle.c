/* Process lifecycles against a real daemon: fork children, thread exit,
 * process exit, heap full, a bad free, and a client killed with SIGKILL. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "tcm_layout.h"
#include "testutil.h"

static tcm_test_daemon_t d;

/* fork: the child frees the parent's objects and allocates its own; the
 * parent's caches are untouched by it. */
static char *parent_objs[100];
static char *parent_run; /* a page run: the child's very first call frees it (bash's command substitution) */

static int child_after_fork(void *arg)
{
    (void)arg;
    CHECK_EQ(parent_run[4095], 7);
    tcm_free(parent_run); /* the channel is not mapped yet: this attaches first */
    for (int i = 0; i < 100; i++) {
        CHECK_EQ(parent_objs[i][0], (char)i);
        tcm_free(parent_objs[i]); /* the child attaches as a new client */
    }
    for (int i = 0; i < 1000; i++)
        tcm_free(tcm_malloc(64));
    return 0;
}

static void test_fork(void)
{
    parent_run = tcm_malloc(1 << 20);
    parent_run[4095] = 7;
    for (int i = 0; i < 100; i++) {
        parent_objs[i] = tcm_malloc(64);
        parent_objs[i][0] = (char)i;
    }
    /* warm this thread's cache so the child inherits a non-empty one */
    void *tmp[50];
    for (int i = 0; i < 50; i++)
        tmp[i] = tcm_malloc(64);
    for (int i = 0; i < 50; i++)
        tcm_free(tmp[i]);
    uint64_t clients_before = tt_stat(&d, "clients_total");
    pid_t pid = tt_fork(child_after_fork, NULL);
    tt_wait_ok(pid, 20000);
    CHECK_EQ(tt_stat(&d, "clients_total"), clients_before + 1);
    /* the parent still owns its cache: these come from it without a conflict */
    for (int i = 0; i < 50; i++)
        tmp[i] = tcm_malloc(64);
    for (int i = 0; i < 50; i++)
        tcm_free(tmp[i]);
    CHECK_EQ(tt_stat(&d, "refused"), 0);
}

/* Thread exit: the thread's cache is flushed and its slot reused. */
static void *thread_body(void *arg)
{
    (void)arg;
    void *p[500];
    for (int i = 0; i < 500; i++)
        p[i] = tcm_malloc(1000);
    for (int i = 0; i < 500; i++)
        tcm_free(p[i]);
    return NULL;
}

static void test_thread_exit(void)
{
    uint32_t threads = 0;
    tcm_free(tcm_malloc(16)); /* the main thread has a cache of its own */
    for (int round = 0; round < 300; round++) { /* more threads than --max-threads 64 */
        pthread_t t;
        pthread_create(&t, NULL, thread_body, NULL);
        pthread_join(t, NULL);
    }
    tt_clients(&d, getpid(), NULL, NULL, &threads);
    CHECK_EQ(threads, 1); /* only the main thread still has a cache */
}

/* More threads at once than --max-threads (64): the extra ones share the
 * process's transfer tier, which moves whole batches, instead of one round
 * trip to tcmd per object. */
static _Atomic int overflow_go;

static void *overflow_body(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    while (!atomic_load(&overflow_go))
        usleep(100);
    for (int round = 0; round < 40; round++) {
        uint64_t *p[50];
        for (int i = 0; i < 50; i++) {
            CHECK((p[i] = tcm_malloc(64)) != NULL);
            p[i][0] = id << 32 | (uint64_t)(round * 50 + i);
        }
        for (int i = 0; i < 50; i++) {
            CHECK_EQ(p[i][0], id << 32 | (uint64_t)(round * 50 + i));
            tcm_free(p[i]);
        }
    }
    return NULL;
}

static void test_overflow_threads(void)
{
    enum { N = 100 };
    pthread_t t[N];
    uint64_t requests = tt_stat(&d, "requests");
    atomic_store(&overflow_go, 0);
    for (uintptr_t i = 0; i < N; i++)
        pthread_create(&t[i], NULL, overflow_body, (void *)i);
    atomic_store(&overflow_go, 1);
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    /* 100 threads x 4000 operations; per object it would be 400 000 requests */
    CHECK_LT(tt_stat(&d, "requests") - requests, 40000);
    CHECK_EQ(tt_stat(&d, "refused"), 0);
}

/* Threads that start together: a refill from tcmd also brings the other
 * threads' next batches into the transfer tier, so they do not each climb
 * the slow start a round trip to tcmd at a time (16 threads x 8 steps to
 * 200 objects would be 128 refills). */
enum { SHARE_THREADS = 16, SHARE_OBJS = 200, SHARE_SIZE = 1000 };
static _Atomic int share_go;
static pthread_barrier_t share_allocated; /* nothing is freed (to the tier) before all have allocated */

static void *share_body(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    uint64_t *p[SHARE_OBJS];
    while (!atomic_load(&share_go))
        usleep(100);
    for (int i = 0; i < SHARE_OBJS; i++) {
        CHECK((p[i] = tcm_malloc(SHARE_SIZE)) != NULL);
        p[i][0] = id << 32 | (uint64_t)i;
    }
    pthread_barrier_wait(&share_allocated);
    for (int i = 0; i < SHARE_OBJS; i++) {
        CHECK_EQ(p[i][0], id << 32 | (uint64_t)i);
        tcm_free(p[i]);
    }
    return NULL;
}

static void test_threads_share_refills(void)
{
    pthread_t t[SHARE_THREADS];
    uint64_t refills = tt_stat(&d, "requests_refill");
    atomic_store(&share_go, 0);
    pthread_barrier_init(&share_allocated, NULL, SHARE_THREADS);
    for (uintptr_t i = 0; i < SHARE_THREADS; i++)
        pthread_create(&t[i], NULL, share_body, (void *)i);
    atomic_store(&share_go, 1);
    for (int i = 0; i < SHARE_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&share_allocated);
    refills = tt_stat(&d, "requests_refill") - refills;
    fprintf(stderr, "  %d threads, %d objects each: %llu refills from tcmd\n", SHARE_THREADS, SHARE_OBJS,
            (unsigned long long)refills);
    CHECK_LT(refills, 64); /* half the slow start of each thread alone */
}

/* A process whose threads keep refilling from tcmd, each refill bringing
 * the others a surplus through the transfer tier, SIGKILLed at random
 * instants: every time, the reclaim leaves a heap the validator finds
 * consistent and refuses nothing (an object listed in an answered slot and
 * in the tier or a bin is freed once, the second quietly skipped). */
static void *sharing_body(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    uint64_t *p[1500];
    unsigned s = (unsigned)id * 2654435761u + 1;
    for (uint64_t round = 0;; round++) {
        for (int i = 0; i < 1500; i++) {
            s = s * 1103515245u + 12345u;
            CHECK((p[i] = tcm_malloc(16 + (s >> 8) % 3000)) != NULL);
            p[i][0] = id << 48 | round << 16 | (uint64_t)i;
        }
        for (int i = 0; i < 1500; i++) {
            CHECK_EQ(p[i][0], id << 48 | round << 16 | (uint64_t)i);
            tcm_free(p[i]);
        }
    }
    return NULL;
}

static int sharing_child(void *arg)
{
    (void)arg;
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, sharing_body, (void *)(i + 1));
    pthread_join(t[0], NULL);
    return 0;
}

static void test_sigkill_sharing_refills(void)
{
    char out[256];
    /* small caches: the threads go back to tcmd and the tier all the time */
    CHECK_EQ(tt_tcmctl(&d, "config set tcache_budget 256K", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&d, "config set xfer_budget 512K", out, sizeof out), 0);
    uint64_t refused = tt_stat(&d, "refused"), seed = 77;
    for (int k = 0; k < 15; k++) {
        uint64_t died = tt_stat(&d, "clients_died"), refills = tt_stat(&d, "requests_refill");
        pid_t pid = tt_fork(sharing_child, NULL);
        for (int ms = 0; tt_stat(&d, "requests_refill") < refills + 50; ms++) { /* well into the work */
            CHECK_LT(ms, 10000);
            usleep(1000);
        }
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        usleep((useconds_t)((seed >> 33) % 20000));
        kill(pid, SIGKILL);
        CHECK(WIFSIGNALED(tt_wait(pid, 10000)));
        CHECK_EQ(tt_wait_stat(&d, "clients_died", died + 1, 5000), died + 1);
        tt_check_heap(&d);
        CHECK_EQ(tt_stat(&d, "refused"), refused);
    }
    CHECK_EQ(tt_tcmctl(&d, "config set tcache_budget 32M", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&d, "config set xfer_budget " TCM_DEFAULT_XFER_BUDGET, out, sizeof out), 0);
}

/* Process exit without tcm_shutdown: the daemon reclaims everything the
 * process had cached; what it left allocated is reported. */
static int child_exits(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5000; i++)
        tcm_free(tcm_malloc(i % 3000 + 1));
    tcm_malloc(100000); /* leaked on purpose: reported at exit */
    return 0;
}

static void test_process_exit(void)
{
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 1, 5000), 1);
    uint64_t clients_before = tt_stat(&d, "bytes_clients");
    uint64_t lost_before = tt_stat(&d, "bytes_orphaned");
    tt_wait_ok(tt_fork(child_exits, NULL), 20000);
    /* the child's caches came back; only its leaked object is still out
     * (it died with _exit, without detaching, so it counts as lost) */
    uint64_t leaked = 100000 + 100000 / 8; /* class rounding stays under 1/8 */
    uint64_t v = 0;
    for (int i = 0; i < 500; i++) {
        v = tt_stat(&d, "bytes_clients");
        if (v - clients_before <= leaked && tt_stat(&d, "bytes_orphaned") > lost_before)
            break;
        usleep(10000);
    }
    CHECK_GE(v - clients_before, 100000);
    CHECK_LE(v - clients_before, leaked);
    CHECK_GE(tt_stat(&d, "bytes_orphaned") - lost_before, 100000);
}

/* Heap full: NULL with ENOMEM, nothing crashes, and memory comes back. */
static void test_heap_full(void)
{
    tcm_test_daemon_t small;
    const char *args[] = {"--heap-size", "8M", NULL};
    tt_daemon_start(&small, args);
    pid_t pid = fork();
    if (pid == 0) {
        CHECK_EQ(tcm_init(small.socket), 0); /* the child is a client of the small daemon */
        static void *ps[100000];
        int n = 0;
        errno = 0;
        while (n < 100000 && (ps[n] = tcm_malloc(5000)) != NULL)
            n++;
        CHECK_EQ(errno, ENOMEM);
        CHECK_GT(n, 1000);
        CHECK(tcm_malloc(4 << 20) == NULL);
        CHECK_EQ(errno, ENOMEM);
        for (int i = 0; i < n; i++)
            tcm_free(ps[i]);
        void *big = tcm_malloc(4 << 20); /* room again once freed */
        CHECK(big != NULL);
        tcm_free(big);
        tcm_shutdown();
        _exit(0);
    }
    tt_wait_ok(pid, 30000);
    CHECK_EQ(tt_wait_stat(&small, "bytes_clients", 0, 5000), 0);
    tt_daemon_stop(&small);
}

/* A bad free is a clear fatal error in the process that made it. */
static void expect_abort(void (*fn)(void), const char *needle)
{
    int pipefd[2];
    CHECK_EQ(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        fn();
        _exit(0);
    }
    close(pipefd[1]);
    char buf[4096] = "";
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(pipefd[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    close(pipefd[0]);
    int st = tt_wait(pid, 20000);
    if (!WIFSIGNALED(st))
        fprintf(stderr, "expected a fatal error ('%s'), child exited %d; it wrote: %s\n", needle,
                WEXITSTATUS(st), buf);
    CHECK(WIFSIGNALED(st));
    CHECK_EQ(WTERMSIG(st), SIGABRT);
    if (!strstr(buf, needle)) {
        fprintf(stderr, "expected '%s' in: %s\n", needle, buf);
        abort();
    }
}

static void free_stack(void)
{
    int x;
    tcm_free(&x);
}

static void free_interior(void)
{
    char *p = tcm_malloc(100);
    tcm_free(p + 8);
}

static void free_large_twice(void)
{
    void *p = tcm_malloc(1 << 20);
    tcm_free(p);
    tcm_free(p);
}

/* The same with the page-run cache full: the first free goes to tcmd on a
 * FREE_PAGES the thread does not wait for; the second is caught by the page
 * map if tcmd has served the first, else by tcmd, answered when the slot is
 * next needed (here at the shutdown's flush at the latest). */
static void free_large_twice_uncached(void)
{
    static void *ps[80];
    for (int i = 0; i < 80; i++)
        ps[i] = tcm_malloc(1 << 20);
    for (int i = 0; i < 80; i++)
        tcm_free(ps[i]); /* 64 cached (the cache's entries), 16 to tcmd */
    tcm_free(ps[79]); /* right after its first free: usually before tcmd has served it */
    tcm_shutdown();
}

/* A second free of a small object: the hit path takes it, tcmd refuses it
 * when its batch comes back (a RETURN the thread did not wait for, or the
 * flush at shutdown), and the process stops with the reason. */
static void free_small_twice(void)
{
    static void *ps[20000];
    for (int i = 0; i < 20000; i++)
        ps[i] = tcm_malloc(64);
    for (int i = 0; i < 20000; i++)
        tcm_free(ps[i]);
    tcm_free(ps[0]);
    for (int i = 0; i < 20000; i++) /* bins full again: batches go back while the thread goes on */
        tcm_free(ps[i] = tcm_malloc(64));
    tcm_shutdown();
}

static void test_bad_free(void)
{
    expect_abort(free_small_twice, "double free");
    expect_abort(free_stack, "invalid pointer");
    expect_abort(free_interior, "invalid pointer");
    expect_abort(free_large_twice, "double free of page run"); /* the page-run cache has it already */
    expect_abort(free_large_twice_uncached, "double free");
    CHECK(tt_daemon_alive(&d));
}

/* A child that runs fill() and then waits to be killed; returns once it
 * has filled, with what tcmd says it holds and caches. */
static pid_t fork_filled(void (*fill)(void), uint64_t *held, uint64_t *cached)
{
    int *ready = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    /* earlier children are reclaimed asynchronously: start from quiet */
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 1, 5000), 1);
    pid_t pid = fork();
    if (pid == 0) {
        fill();
        __atomic_store_n(ready, 1, __ATOMIC_RELEASE);
        for (;;)
            pause();
    }
    while (!__atomic_load_n(ready, __ATOMIC_ACQUIRE))
        usleep(1000);
    munmap(ready, 4096);
    tt_clients(&d, pid, held, cached, NULL);
    return pid;
}

/* SIGKILL it; returns how many bytes of clients tcmd took back, and what
 * tcmd said the child held and cached just before. Requests the child did
 * not wait for (a RETURN, a batch asked for ahead, which its cached figure
 * counts from the moment it is asked for) may still be unserved when
 * fork_filled looked, on a loaded machine: the figures are read until they
 * have not moved for 100 ms. */
static uint64_t kill_filled(pid_t pid, uint64_t *held, uint64_t *cached)
{
    uint64_t died_before = tt_stat(&d, "clients_died"), clients_before = 0, h, c, total;
    *held = *cached = UINT64_MAX;
    for (int quiet = 0, tries = 0; quiet < 4; tries++) {
        CHECK_LT(tries, 400);
        tt_clients(&d, pid, &h, &c, NULL);
        total = tt_stat(&d, "bytes_clients");
        quiet = h == *held && c == *cached && total == clients_before ? quiet + 1 : 0;
        *held = h, *cached = c, clients_before = total;
        usleep(25000);
    }
    kill(pid, SIGKILL);
    CHECK(WIFSIGNALED(tt_wait(pid, 10000)));
    CHECK_EQ(tt_wait_stat(&d, "clients_died", died_before + 1, 5000), died_before + 1);
    return clients_before - tt_stat(&d, "bytes_clients");
}

static void fill_in_flight(void)
{
    enum { N = 100000 };
    static void *ps[2 * N];
    for (int i = 0; i < N; i++) /* 6.4 MB of one class: refill after refill from tcmd */
        CHECK((ps[i] = tcm_malloc(64)) != NULL);
    for (int i = 0; i < N / 2; i++) /* half back, batches to tcmd without waiting */
        tcm_free(ps[i]);
    for (int i = N; i < 2 * N; i++) /* its caches, then tcmd again: the last batch asked for ahead */
        CHECK((ps[i] = tcm_malloc(64)) != NULL);
}

/* SIGKILL while the thread has a batch fetched ahead of need (it kept
 * refilling one class from tcmd), after RETURNs it did not wait for: the
 * caches and that batch come back; only what it had in use is orphaned. */
static void test_sigkill_in_flight(void)
{
    uint64_t held = 0, cached = 0;
    pid_t pid = fork_filled(fill_in_flight, &held, &cached);
    CHECK_GE(held, 150000u * 64); /* what it still uses */
    /* the caches, the fetched-ahead batch among them, came back: only what it used is orphaned */
    uint64_t back = kill_filled(pid, &held, &cached);
    CHECK_EQ(back, cached);
    tt_check_heap(&d);
}

static void fill_returned_again(void)
{
    enum { N = 20000 };
    static void *ps[N];
    for (int i = 0; i < N; i++)
        CHECK((ps[i] = tcm_malloc(64)) != NULL);
    for (int i = 0; i < N; i++) /* full bins: batches back to tcmd, not waited for */
        tcm_free(ps[i]);
    /* the bin, the batch it had asked for ahead, then the next one (asked
     * for after those RETURNs): objects it gave back, back in its bin */
    for (int i = 0; i < 4096 + 512 + 100; i++)
        CHECK((ps[i] = tcm_malloc(64)) != NULL);
}

/* SIGKILL after objects it gave back (in RETURNs it did not wait for) came
 * back into its bin: all of its caches come back, none is skipped as
 * "already given back". */
static void test_sigkill_returned_again(void)
{
    uint64_t held = 0, cached = 0;
    pid_t pid = fork_filled(fill_returned_again, &held, &cached);
    CHECK_GE(cached, 100u * 64);
    uint64_t back = kill_filled(pid, &held, &cached);
    CHECK_EQ(back, cached);
    tt_check_heap(&d);
}

/* The same when the objects went back at a thread's exit: what an exiting
 * thread gives back stays posted on its cache's slots, answered and not
 * settled, while the next thread on that cache takes the same objects
 * back from tcmd; none of that thread's caches is skipped either (it kept
 * the slots' dropped bits). No transfer tier (xfer_budget 0), so that the
 * exit's bin goes to tcmd. */
static void *exit_returning(void *arg)
{
    (void)arg;
    fill_returned_again(); /* bins full, then refilled: its exit posts them to tcmd */
    return NULL;
}

static void *refill_after_exit(void *arg)
{
    /* a few refills, none asked for ahead: the slots its predecessor left
     * stay unsettled until the kill */
    for (int i = 0; i < 100; i++)
        CHECK(tcm_malloc(64) != NULL);
    __atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
    for (;;)
        pause();
    return NULL;
}

static void fill_after_exit(void)
{
    static int ready;
    pthread_t t;
    tcm_free(tcm_malloc(64)); /* the main thread takes cache 0: the two below cache 1, in turn */
    pthread_create(&t, NULL, exit_returning, NULL);
    pthread_join(t, NULL);
    pthread_create(&t, NULL, refill_after_exit, &ready);
    while (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE))
        usleep(1000);
}

static void test_sigkill_returned_after_exit(void)
{
    char out[256];
    uint64_t held = 0, cached = 0;
    CHECK_EQ(tt_tcmctl(&d, "config set xfer_budget 0", out, sizeof out), 0);
    pid_t pid = fork_filled(fill_after_exit, &held, &cached);
    CHECK_GE(cached, 100u * 64);
    uint64_t back = kill_filled(pid, &held, &cached);
    CHECK_EQ(tt_tcmctl(&d, "config set xfer_budget " TCM_DEFAULT_XFER_BUDGET, out, sizeof out), 0);
    CHECK_EQ(back, cached);
    tt_check_heap(&d);
}

static void fill_caches(void)
{
    /* thread bins and the transfer tier */
    static void *ps[20000];
    for (int i = 0; i < 20000; i++)
        ps[i] = tcm_malloc(48 + (i % 4) * 100);
    for (int i = 0; i < 20000; i++)
        tcm_free(ps[i]);
    /* and its page-run cache */
    void *runs[8];
    for (int i = 0; i < 8; i++)
        runs[i] = tcm_malloc((size_t)(i + 1) << 19);
    for (int i = 0; i < 8; i++)
        tcm_free(runs[i]);
}

/* SIGKILL: the daemon keeps serving the others and takes back what sat in
 * the dead client's caches. */
static void test_sigkill(void)
{
    uint64_t reclaimed_before = tt_stat(&d, "reclaimed_objects");
    uint64_t held = 0, cached = 0;
    pid_t pid = fork_filled(fill_caches, &held, &cached);
    CHECK_GT(cached, 18u << 20); /* 18 MiB of page runs among it */
    /* all it held was cache, so all of it came back */
    uint64_t back = kill_filled(pid, &held, &cached);
    CHECK_EQ(back, held);
    CHECK_GT(tt_stat(&d, "reclaimed_objects"), reclaimed_before);
    /* and the daemon still serves everyone else */
    void *p = tcm_malloc(12345);
    CHECK(p != NULL);
    tcm_free(p);
}

/* A batch an exiting thread left in its process's transfer tier, taken by
 * another thread and freed by another process, while the rest of its bin
 * waits for tcmd in a RETURN the thread posted and did not wait for: a
 * SIGKILL then must not make tcmd reclaim what the other process now
 * caches. tcmd is stopped (SIGSTOP) so that the RETURN stays posted. The
 * state is made, then seen before the case goes on, and the case fails if
 * it is not:
 * - no decay (decay_ms 0): every class counts as busy, so bins only grow
 *   and no scavenge empties one on a clock; the thread's bin keeps all of
 *   the HANDOFF_OBJS objects it freed;
 * - no tier while it fills its bin (xfer_budget 0), so the tier holds
 *   nothing of its refills; then a 16K one, which the thread sees (and
 *   gives back the batches it asked for ahead) in a slow path while tcmd
 *   runs;
 * - at its exit the tier takes the top 16 of its bin and the rest is posted
 *   to stopped tcmd: the thread ends without waiting for it (joined while
 *   tcmd is stopped), and what the other thread takes from the tier is what
 *   it freed last. */
#define HANDOFF_OBJS 200 /* what the exiting thread caches: far more than a 16K tier takes */
#define HANDOFF_TAKEN 8  /* what another thread then takes from the tier */

enum { HO_FILLED = 1, HO_BUDGET_SET, HO_SEEN, HO_EXIT, HO_TAKEN };

typedef struct handoff {
    _Atomic int phase; /* the last of the HO_ steps done */
    void *mine[HANDOFF_OBJS]; /* what the exiting thread allocated and freed */
    void *objs[HANDOFF_TAKEN];
} handoff_t;

static handoff_t *ho;

static void handoff_step(int done, int wait_for)
{
    atomic_store(&ho->phase, done);
    while (atomic_load(&ho->phase) < wait_for)
        usleep(1000);
}

static void *handoff_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < HANDOFF_OBJS; i++)
        CHECK((ho->mine[i] = tcm_malloc(1000)) != NULL);
    for (int i = 0; i < HANDOFF_OBJS; i++)
        tcm_free(ho->mine[i]);
    /* what it posted without waiting is answered: tcmd serves the ring in
     * order, and removing a name no root has is a round trip that changes
     * nothing */
    CHECK_EQ(tcm_root_set("lifecycle.no.such.root", NULL), 0);
    handoff_step(HO_FILLED, HO_BUDGET_SET);
    /* a slow path of another class: the new budget is seen, and a bin no
     * 16K tier takes */
    tcm_free(tcm_malloc(20000));
    CHECK_EQ(tcm_root_set("lifecycle.no.such.root", NULL), 0);
    handoff_step(HO_SEEN, HO_EXIT);
    return NULL; /* exits: 16 objects to the tier, the rest to (stopped) tcmd */
}

static bool handed_off(const void *p)
{
    for (int i = HANDOFF_OBJS - 16; i < HANDOFF_OBJS; i++) /* the top of its bin: freed last */
        if (ho->mine[i] == p)
            return true;
    return false;
}

static int handoff_child(void *arg)
{
    (void)arg;
    tcm_free(tcm_malloc(64)); /* attached, this thread registered, while tcmd runs */
    pthread_t t;
    pthread_create(&t, NULL, handoff_thread, NULL);
    while (atomic_load(&ho->phase) < HO_EXIT)
        usleep(1000);
    /* the state this case is about: the thread gone, 16 objects in the
     * tier, the rest posted for tcmd to take */
    pthread_join(t, NULL);
    for (int i = 0; i < HANDOFF_TAKEN; i++) { /* from the transfer tier: no daemon needed */
        CHECK((ho->objs[i] = tcm_malloc(1000)) != NULL);
        CHECK(handed_off(ho->objs[i]));
    }
    atomic_store(&ho->phase, HO_TAKEN);
    for (;;)
        pause();
}

/* Until the child has done step `phase`; false if it died or 10 s passed. */
static bool handoff_wait(pid_t pid, int phase)
{
    int st;
    for (int ms = 0; ms < 10000; ms++) {
        if (atomic_load(&ho->phase) >= phase)
            return true;
        if (waitpid(pid, &st, WNOHANG) != 0)
            return false; /* it failed a check */
        usleep(1000);
    }
    return false;
}

static void test_sigkill_tier_handoff(void)
{
    char out[256];
    CHECK_EQ(tt_tcmctl(&d, "config set decay_ms 0", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&d, "config set xfer_budget 0", out, sizeof out), 0);
    for (int i = 0; i < 20; i++) /* this thread sees the new settings while tcmd runs */
        tcm_free(tcm_malloc(3000 + (size_t)i * 1000));
    ho = mmap(NULL, sizeof *ho, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(ho != MAP_FAILED);
    uint64_t died = tt_stat(&d, "clients_died"), refused = tt_stat(&d, "refused");
    pid_t pid = tt_fork(handoff_child, NULL);
    CHECK(handoff_wait(pid, HO_FILLED));
    CHECK_EQ(tt_tcmctl(&d, "config set xfer_budget 16K", out, sizeof out), 0);
    atomic_store(&ho->phase, HO_BUDGET_SET);
    CHECK(handoff_wait(pid, HO_SEEN));
    CHECK(tt_stop(d.pid, 10000)); /* stopped before the exit posts its RETURN */
    atomic_store(&ho->phase, HO_EXIT);
    bool reached = handoff_wait(pid, HO_TAKEN);
    if (!reached) { /* the child failed a check, or needed tcmd after all */
        kill(d.pid, SIGCONT);
        fprintf(stderr, "tier handoff: the child did not reach the state to test (its check above)\n");
        CHECK(reached);
    }
    for (int i = 0; i < HANDOFF_TAKEN; i++) /* into this process's cache */
        tcm_free(ho->objs[i]);
    kill(pid, SIGKILL);
    CHECK(WIFSIGNALED(tt_wait(pid, 10000)));
    kill(d.pid, SIGCONT);
    CHECK_EQ(tt_wait_stat(&d, "clients_died", died + 1, 5000), died + 1);
    tt_check_heap(&d); /* before: "a thread cache ... holds ...: object is already free" */
    CHECK_EQ(tt_stat(&d, "refused"), refused);
    munmap(ho, sizeof *ho);
    CHECK_EQ(tt_tcmctl(&d, "config set xfer_budget " TCM_DEFAULT_XFER_BUDGET, out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&d, "config set decay_ms 10000", out, sizeof out), 0);
}

/* Departures in the log: one line each when they happen (info for a
 * process that detached), and a warning about what one left only if it is
 * still allocated a decay window later, naming only those bytes. A worker
 * whose objects its neighbour freed is not called a leaker (the old tree
 * warned "died without detaching ... still in use" at every exit). */
static uint64_t *handed; /* [0]: count, then offsets */
static tcm_test_daemon_t quiet; /* at log level info, as tcmd runs by default: its windows hold no debug lines */

static int hands_over(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(quiet.socket), 0);
    for (int i = 0; i < 100; i++)
        handed[1 + i] = tcm_to_offset(tcm_malloc(64));
    handed[0] = 100;
    exit(0); /* a normal exit: Bye */
}

static int frees_them(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(quiet.socket), 0);
    for (uint64_t i = 0; i < handed[0]; i++)
        tcm_free(tcm_from_offset(handed[1 + i]));
    return 0; /* exit: its caches, and with them those objects, go back */
}

static int leaks(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(quiet.socket), 0);
    for (int i = 0; i < 10; i++)
        CHECK(tcm_malloc(64) != NULL);
    exit(0);
}

static int count_lines(const char *needle, const char *also)
{
    FILE *f = fopen(quiet.log, "r");
    CHECK(f != NULL);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) && (!also || strstr(line, also));
    fclose(f);
    return n;
}

/* A holder is named decay_ms + TCM_HOLDER_WARN_SLACK_S after it left if it
 * still holds something: A's objects must be freed before that, which
 * takes a sanitizer's forks and attaches seconds on a busy box (an ASan
 * pass logged A once). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DEPARTURE_DECAY_MS "6000"
#else
#define DEPARTURE_DECAY_MS "1000"
#endif

static void test_departure_lines(void)
{
    char a[48], l[48];
    const char *args[] = {"--log-level", "info", "--decay-ms", DEPARTURE_DECAY_MS, NULL};
    tt_daemon_start(&quiet, args);
    handed = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pa = tt_fork(hands_over, NULL);
    tt_wait_ok(pa, 20000);
    pid_t pl = tt_fork(leaks, NULL);
    tt_wait_ok(pl, 20000);
    CHECK_EQ(tt_wait_stat(&quiet, "departed_holders", 2, 5000), 2);
    tt_wait_ok(tt_fork(frees_them, NULL), 20000);
    CHECK_EQ(tt_wait_stat(&quiet, "departed_holders", 1, 5000), 1); /* A's all freed: gone */
    snprintf(a, sizeof a, "(pid %d,", (int)pa);
    snprintf(l, sizeof l, "(pid %d,", (int)pl);
    for (int i = 0; i < 400 && !count_lines(l, "still in use (held by other processes, or leaked"); i++)
        usleep(50000);
    CHECK_EQ(count_lines(l, "ended"), 1);            /* the leaker, once, a window after it left */
    CHECK_EQ(count_lines(l, "640 bytes it allocated are still in use"), 1);
    CHECK_EQ(count_lines(a, "ended"), 0);            /* not the one whose objects were freed */
    CHECK_EQ(count_lines(a, "detached"), 1);
    CHECK_EQ(count_lines(a, "info: client"), 1);     /* its departure: an info line */
    CHECK_EQ(count_lines(a, "warn:"), 0);
    munmap(handed, 4096);
    tt_daemon_kill(&quiet); /* L's objects are still there: a stop would leave the heap; remove it */
    char cmd[320], out[64];
    snprintf(cmd, sizeof cmd, "rm -f /dev/shm/tcm.%s.* %s", quiet.name, quiet.socket);
    tt_run(cmd, out, sizeof out);
}

/* Liveness without pidfds is still the process: a program whose main
 * thread called pthread_exit while another runs is alive (its leader is a
 * zombie). The tree before took it for dead where pidfd_open is refused,
 * and its caches were reclaimed and handed out again while it used them. */
static _Atomic int *leader_gone;
static tcm_test_daemon_t nd; /* a tcmd without pidfds */

static void *outlives_main(void *arg)
{
    (void)arg;
    static void *held[1000];
    for (int i = 0; i < 1000; i++) {
        CHECK((held[i] = tcm_malloc(64)) != NULL);
        memset(held[i], 0x5a, 64);
    }
    while (!atomic_load(leader_gone))
        usleep(1000);
    usleep(2500000); /* past two rounds of tcmd's liveness timer */
    for (int i = 0; i < 1000; i++)
        for (int k = 0; k < 64; k++)
            CHECK_EQ(((unsigned char *)held[i])[k], 0x5a); /* nobody else was handed them */
    for (int i = 0; i < 1000; i++)
        tcm_free(held[i]);
    exit(0);
}

static int main_thread_exits(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(nd.socket), 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, outlives_main, NULL), 0);
    atomic_store(leader_gone, 1);
    pthread_exit(NULL);
}

static int allocates_meanwhile(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(nd.socket), 0);
    static void *held[4000];
    for (int i = 0; i < 4000; i++) {
        CHECK((held[i] = tcm_malloc(64)) != NULL);
        memset(held[i], 0xa5, 64);
    }
    usleep(2000000);
    for (int i = 0; i < 4000; i++)
        tcm_free(held[i]);
    return 0;
}

static void test_leader_exits_no_pidfd(void)
{
    const char *env[] = {TT_NO_PIDFD, NULL};
    tt_daemon_start_env(&nd, NULL, env);
    leader_gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pid_t pid = tt_fork(main_thread_exits, NULL);
    while (!atomic_load(leader_gone))
        usleep(1000);
    pid_t other = tt_fork(allocates_meanwhile, NULL);
    usleep(1500000);
    CHECK_EQ(tt_stat(&nd, "clients_died"), 0);
    tt_wait_ok(pid, 30000);
    tt_wait_ok(other, 30000);
    CHECK_EQ(tt_wait_stat(&nd, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&nd, "bytes_clients"), 0);
    CHECK(tt_log_contains(&nd, "pidfd"));
    tt_check_heap(&nd);
    tt_daemon_stop(&nd);
    munmap(leader_gone, 4096);
}

int main(int argc, char **argv)
{
    /* no heap profile: a sampled page run goes back to tcmd at its free,
     * never to the page-run cache that test_sigkill fills */
    const char *args[] = {"--max-threads", "64", "--profile-sample", "0", NULL};
    tt_daemon_start(&d, args);
    CHECK_EQ(tcm_init(d.socket), 0);
    static const tt_case_t cases[] = {
        {"departure lines", test_departure_lines}, /* first: nothing before it fills the log's windows */
        {"fork", test_fork},
        {"thread exit", test_thread_exit},
        {"overflow threads", test_overflow_threads},
        {"threads share refills", test_threads_share_refills},
        {"sigkill while threads share refills", test_sigkill_sharing_refills},
        {"process exit", test_process_exit},
        {"heap full", test_heap_full},
        {"bad free", test_bad_free},
        {"sigkill", test_sigkill},
        {"sigkill in flight", test_sigkill_in_flight},
        {"sigkill returned again", test_sigkill_returned_again},
        {"sigkill returned after an exit", test_sigkill_returned_after_exit},
        {"sigkill tier handoff", test_sigkill_tier_handoff},
        {"main thread exits, no pidfds", test_leader_exits_no_pidfd},
    };
    int failed = tt_run_named_cases("lifecycle", cases, sizeof cases / sizeof cases[0], 120000, argv + 1, argc - 1);
    tcm_shutdown();
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    tt_daemon_stop(&d);
    return failed != 0;
}
