/* Process-shared locks in the heap (tcm(3), LOCKS; README "C++
 * containers"): what a program may rely on when a process dies holding or
 * waiting on one. Real processes, a real tcmd, glibc's pthreads:
 *  - a robust, process-shared mutex in the heap whose holder is SIGKILLed
 *    mid-update: the next locker gets EOWNERDEAD, repairs the data, marks it
 *    consistent, and the mutex works on;
 *  - a process-shared condition variable whose waiter is SIGKILLed while it
 *    waits: glibc's (2.36) is not safe then: the next signal still wakes
 *    the live waiter, but in a later round the signal wakes nobody (it
 *    went to the dead waiter's group) or blocks the signaler, and
 *    pthread_cond_destroy never returns. Run in a child with a bound and printed: what
 *    glibc does is not tcm's to assert;
 *  - the pattern tcm(3) gives instead, an event count (a futex word in the
 *    heap next to the robust mutex): waiters SIGKILLed while they wait, in
 *    round after round, cost the others nothing; asserted. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "prim.h"
#include "tcm.h"
#include "testutil.h"

typedef struct shared {
    pthread_mutex_t m;
    pthread_cond_t c;
    _Atomic int stage; /* the test's own steps, not guarded by m */
    int a, b;          /* guarded by m: a == b when consistent */
    int flag, woke;
    _Atomic uint32_t events; /* the event count: bumped (then woken) at every change waiters wait for */
} shared_t;

static tcm_test_daemon_t d;

static shared_t *attach(void)
{
    CHECK_EQ(tcm_init(d.socket), 0);
    shared_t *s = tcm_root_get("locks.shared");
    CHECK(s != NULL);
    return s;
}

static int dies_holding(void *arg)
{
    (void)arg;
    shared_t *s = attach();
    CHECK_EQ(pthread_mutex_lock(&s->m), 0);
    s->a++; /* half an update: b not yet */
    atomic_store(&s->stage, 1);
    for (;;)
        pause();
}

static int repairs(void *arg)
{
    (void)arg;
    shared_t *s = attach();
    int rc = pthread_mutex_lock(&s->m);
    CHECK_EQ(rc, EOWNERDEAD);
    CHECK_EQ(s->a, s->b + 1); /* what the dead holder left half done */
    s->b = s->a;              /* repaired */
    CHECK_EQ(pthread_mutex_consistent(&s->m), 0);
    CHECK_EQ(pthread_mutex_unlock(&s->m), 0);
    CHECK_EQ(pthread_mutex_lock(&s->m), 0); /* an ordinary mutex again */
    CHECK_EQ(pthread_mutex_unlock(&s->m), 0);
    tcm_shutdown();
    return 0;
}

static int waits(void *arg)
{
    int mark = (int)(intptr_t)arg;
    shared_t *s = attach();
    int rc = pthread_mutex_lock(&s->m);
    CHECK(rc == 0 || rc == EOWNERDEAD);
    if (rc == EOWNERDEAD)
        pthread_mutex_consistent(&s->m);
    atomic_fetch_add(&s->stage, 1);
    while (!s->flag) {
        rc = pthread_cond_wait(&s->c, &s->m);
        CHECK(rc == 0 || rc == EOWNERDEAD);
    }
    s->woke += mark;
    pthread_mutex_unlock(&s->m);
    if (mark != 100)
        tcm_shutdown();
    return 0;
}

static void wait_stage(shared_t *s, int want)
{
    for (int i = 0; atomic_load(&s->stage) < want; i++) {
        CHECK_LT(i, 10000);
        usleep(1000);
    }
}

/* A waiter killed while it waits, another waiting; one wake-up (a signal)
 * with the flag set must reach the live one. */
static void dead_waiter_round(shared_t *s)
{
    atomic_store(&s->stage, 0);
    s->flag = s->woke = 0;
    pid_t dead = tt_fork(waits, (void *)(intptr_t)100);
    wait_stage(s, 1);
    pid_t live = tt_fork(waits, (void *)(intptr_t)1);
    wait_stage(s, 2);
    CHECK(tt_wait_threads_asleep(dead, 5000) && tt_wait_threads_asleep(live, 5000));
    kill(dead, SIGKILL);
    tt_wait(dead, 5000);
    int rc = pthread_mutex_lock(&s->m);
    CHECK(rc == 0 || rc == EOWNERDEAD);
    if (rc == EOWNERDEAD)
        pthread_mutex_consistent(&s->m);
    s->flag = 1;
    CHECK_EQ(pthread_cond_signal(&s->c), 0); /* (where glibc blocks) */
    pthread_mutex_unlock(&s->m);
    tt_wait_ok(live, 5000);
    CHECK_EQ(s->woke, 1);
}

/* In a child: rounds of a waiter killed while waiting; exits 0 if every
 * round's live waiter woke, is killed by the parent if a signal blocks. */
static int condvar_rounds(void *arg)
{
    shared_t *s = arg;
    setpgid(0, 0); /* its waiters with it: the parent kills them all if a signal blocks */
    for (int round = 0; round < 3; round++) {
        dead_waiter_round(s);
        printf("locks: condition variable, round %d: a waiter SIGKILLed while waiting; the signal woke the live "
               "one\n", round + 1);
        fflush(stdout);
    }
    return 0;
}

/* ---- the event count: what to use instead ---- */

static void futex_wait(_Atomic uint32_t *w, uint32_t seen)
{
    struct timespec t = {1, 0}; /* (a bound, for the test's sake only) */
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, seen, &t, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Waits for flag under the robust mutex, sleeping on the event count
 * between looks: nothing of the waiter's stays in a shared structure. */
static int ec_waits(void *arg)
{
    int mark = (int)(intptr_t)arg;
    shared_t *s = attach();
    atomic_fetch_add(&s->stage, 1);
    for (;;) {
        uint32_t seen = atomic_load(&s->events); /* before the look: a change after it bumps it */
        int rc = pthread_mutex_lock(&s->m);
        if (rc == EOWNERDEAD)
            pthread_mutex_consistent(&s->m);
        bool done = s->flag;
        if (done)
            s->woke += mark;
        pthread_mutex_unlock(&s->m);
        if (done)
            break;
        futex_wait(&s->events, seen);
    }
    if (mark != 100)
        tcm_shutdown();
    return 0;
}

static void ec_round(shared_t *s, int round)
{
    atomic_store(&s->stage, 0);
    s->flag = s->woke = 0;
    pid_t dead = tt_fork(ec_waits, (void *)(intptr_t)100), live[2];
    wait_stage(s, 1);
    for (int i = 0; i < 2; i++)
        live[i] = tt_fork(ec_waits, (void *)(intptr_t)1);
    wait_stage(s, 3);
    CHECK(tt_wait_threads_asleep(dead, 5000));
    kill(dead, SIGKILL);
    tt_wait(dead, 5000);
    for (int i = 0; i < 2; i++)
        CHECK(tt_wait_threads_asleep(live[i], 5000));
    uint64_t t0 = tcm__now_ns();
    int rc = pthread_mutex_lock(&s->m);
    CHECK(rc == 0 || rc == EOWNERDEAD);
    if (rc == EOWNERDEAD)
        pthread_mutex_consistent(&s->m);
    s->flag = 1;
    pthread_mutex_unlock(&s->m);
    atomic_fetch_add(&s->events, 1); /* after the change, then the wake */
    futex_wake_all(&s->events);
    for (int i = 0; i < 2; i++)
        tt_wait_ok(live[i], 5000);
    CHECK_EQ(s->woke, 2);
    CHECK_LT(tcm__now_ns() - t0, 500000000ull); /* woken, not the 1 s bound */
    printf("locks: event count, round %d: a waiter SIGKILLed while waiting; both live ones woke\n", round + 1);
}

int main(void)
{
    tt_daemon_start(&d, NULL);
    CHECK_EQ(tcm_init(d.socket), 0);
    shared_t *s = tcm_calloc(1, sizeof *s);
    CHECK(s != NULL);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    CHECK_EQ(pthread_mutex_init(&s->m, &ma), 0);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    CHECK_EQ(pthread_cond_init(&s->c, &ca), 0);
    CHECK_EQ(tcm_root_set("locks.shared", s), 0);

    pid_t holder = tt_fork(dies_holding, NULL);
    wait_stage(s, 1);
    kill(holder, SIGKILL);
    tt_wait(holder, 5000);
    tt_wait_ok(tt_fork(repairs, NULL), 10000);
    CHECK_EQ(s->a, s->b);
    printf("locks: a robust mutex's holder SIGKILLed mid-update: the next locker got EOWNERDEAD, repaired, "
           "went on\n");

    /* glibc's condition variable, in a child: it may block for good */
    pid_t p = tt_fork(condvar_rounds, s);
    bool returned = false;
    int st = 0;
    for (int i = 0; i < 1000 && !returned; i++) {
        returned = waitpid(p, &st, WNOHANG) == p;
        usleep(10000);
    }
    if (!returned) {
        kill(-p, SIGKILL);
        waitpid(p, NULL, 0);
    }
    printf("locks: glibc's process-shared condition variable with waiters that die: %s\n",
           !returned                                 ? "a later signal blocked the signaler (not safe: use an "
                                                       "event count, tcm(3) LOCKS)"
           : WIFEXITED(st) && !WEXITSTATUS(st) ? "every round woke (safe on this glibc)"
                                                 : "a later signal woke nobody (not safe: use an event count, "
                                                   "tcm(3) LOCKS)");
    /* the mutex may have been left held by the blocked child: a new one */
    CHECK_EQ(pthread_mutex_init(&s->m, &ma), 0);

    for (int round = 0; round < 3; round++)
        ec_round(s, round);

    CHECK_EQ(tcm_root_set("locks.shared", NULL), 0);
    tcm_free(s); /* (the condition variable is not destroyed: that blocks too) */
    tcm_shutdown();
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    tt_daemon_stop(&d);
    printf("locks: 1 passed, 0 failed\n");
    return 0;
}
