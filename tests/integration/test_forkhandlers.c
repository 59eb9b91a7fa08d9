/* libtcm's fork handlers call no malloc and no free in the child. The
 * system malloc's own fork handlers (jemalloc's, in a program that brings
 * it) may run after libtcm's, its locks still held from before the fork:
 * a free there can wait forever (redis-server's BGSAVE child did, under the
 * drop-in). This program is its own malloc (glibc's underneath) and
 * counts the calls made while libtcm's child handler runs.
 * Not in sanitizer builds: their runtimes own malloc. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

/* Child handlers run in the order they were registered: libtcm's runs
 * between ours registered before tcm_init (outer) and after it (inner). */
static volatile int in_child_handlers, calls;
static volatile int child_calls; /* what the child had seen when its handlers were done */

static void note(void)
{
    if (in_child_handlers)
        calls++;
}

void *malloc(size_t n)
{
    note();
    return __libc_malloc(n);
}

void free(void *p)
{
    note();
    __libc_free(p);
}

void *calloc(size_t n, size_t size)
{
    note();
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    note();
    return __libc_realloc(p, n);
}

void *memalign(size_t align, size_t n)
{
    note();
    return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    note();
    return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    note();
    *out = __libc_memalign(align, n);
    return *out ? 0 : ENOMEM;
}

static void outer_child(void)
{
    calls = 0;
    in_child_handlers = 1;
}

static void inner_child(void)
{
    child_calls = calls;
    in_child_handlers = 0;
}

static tcm_test_daemon_t d;

static int child_main(void *arg)
{
    (void)arg;
    if (child_calls != 0) {
        fprintf(stderr, "the fork handlers made %d malloc-family calls in the child\n", child_calls);
        return 1;
    }
    /* attaches as a new client, and frees then what the fork left */
    for (int i = 0; i < 1000; i++)
        tcm_free(tcm_malloc(64 + (size_t)i % 512));
    return 0;
}

static void *use_tcm(void *arg)
{
    for (int i = 0; i < 1000; i++)
        tcm_free(tcm_malloc(32));
    return arg;
}

/* Forked from a thread with a cache, in a process with another one and
 * the background thread: every record the child inherits is there. */
static void test_child_handlers(void)
{
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, use_tcm, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    void *kept = tcm_malloc(100);
    use_tcm(NULL);
    for (int round = 0; round < 3; round++)
        tt_wait_ok(tt_fork(child_main, NULL), 20000);
    tcm_free(kept);
}

int main(void)
{
    tt_daemon_start(&d, NULL);
    CHECK_EQ(pthread_atfork(NULL, NULL, outer_child), 0);
    CHECK_EQ(tcm_init(d.socket), 0); /* registers libtcm's fork handlers */
    CHECK_EQ(pthread_atfork(NULL, NULL, inner_child), 0);
    static const tt_case_t cases[] = {
        {"no malloc or free in the fork child's handlers", test_child_handlers},
    };
    int failed = tt_run_cases("forkhandlers", cases, sizeof cases / sizeof cases[0], 60000);
    tcm_shutdown();
    tt_daemon_stop(&d);
    return failed != 0;
}
