/* Stress: several processes x threads doing random-size alloc/free on the
 * one heap, handing objects to each other through a shared exchange so that
 * many frees are cross-process. Every object carries a tag (owner, sequence,
 * size) and a payload derived from it; any double allocation or corruption
 * breaks a tag and fails the test. Deterministic: each thread is seeded. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"

#define PROCS 3
#define THREADS 3
#define OPS 150000
#define LIVE 512
#define EXCHANGE 4096
#define MAGIC 0x7463d57e55ull

typedef struct tag {
    uint64_t magic;
    uint64_t owner; /* proc << 8 | thread */
    uint64_t seq;
    uint64_t size;
} tag_t;

static _Atomic uint64_t *exchange; /* heap offsets, 0 = empty; MAP_SHARED */
static int proc_id;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static size_t random_size(uint64_t *s)
{
    uint64_t r = rnd(s) % 1000;
    if (r < 600)
        return sizeof(tag_t) + rnd(s) % 128;
    if (r < 900)
        return sizeof(tag_t) + rnd(s) % 4096;
    if (r < 995)
        return sizeof(tag_t) + rnd(s) % 65536;
    return sizeof(tag_t) + rnd(s) % (600 * 1024); /* page runs too */
}

static unsigned char fill_byte(const tag_t *t, size_t k)
{
    return (unsigned char)(t->seq * 31 + k + t->owner);
}

static void *make(uint64_t owner, uint64_t seq, size_t size)
{
    tag_t *t = tcm_malloc(size);
    CHECK(t != NULL);
    t->magic = MAGIC;
    t->owner = owner;
    t->seq = seq;
    t->size = size;
    unsigned char *p = (unsigned char *)(t + 1);
    for (size_t k = 0; k < size - sizeof *t; k++)
        p[k] = fill_byte(t, k);
    return t;
}

static void check_and_free(tag_t *t)
{
    CHECK_EQ(t->magic, MAGIC);
    CHECK_GE(tcm_usable_size(t), t->size);
    const unsigned char *p = (const unsigned char *)(t + 1);
    size_t n = t->size - sizeof *t;
    for (size_t k = 0; k < n; k += (n > 4096 ? 61 : 1))
        if (p[k] != fill_byte(t, k)) {
            fprintf(stderr, "object %p owner %llx seq %llu corrupt at %zu\n", (void *)t,
                    (unsigned long long)t->owner, (unsigned long long)t->seq, k);
            abort();
        }
    t->magic = 0;
    tcm_free(t);
}

/* Objects cross processes through the exchange: published by one thread,
 * taken (maybe in another process, freed, handed out again and published
 * once more) by another. ThreadSanitizer sees only this process, so the
 * publish and the take are made a release and an acquire of one address:
 * whatever a thread wrote before publishing is ordered before anything a
 * thread of this process does with what it takes. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char exchange_sync;
#define EXCHANGE_PUBLISH() __tsan_release(&exchange_sync)
#define EXCHANGE_TAKE() __tsan_acquire(&exchange_sync)
#else
#define EXCHANGE_PUBLISH() ((void)0)
#define EXCHANGE_TAKE() ((void)0)
#endif

static void *worker(void *arg)
{
    uint64_t thread = (uint64_t)(uintptr_t)arg;
    uint64_t owner = (uint64_t)proc_id << 8 | thread;
    uint64_t seed = 0x9e3779b97f4a7c15ull * (owner + 1);
    tag_t *live[LIVE] = {0};
    for (uint64_t op = 0; op < OPS; op++) {
        uint64_t r = rnd(&seed) % 100;
        size_t i = rnd(&seed) % LIVE;
        if (r < 45) {
            if (live[i])
                check_and_free(live[i]);
            live[i] = make(owner, op, random_size(&seed));
        } else if (r < 80) {
            if (live[i]) {
                check_and_free(live[i]);
                live[i] = NULL;
            }
        } else if (r < 90) { /* publish to another process */
            if (live[i]) {
                uint64_t expected = 0;
                size_t e = rnd(&seed) % EXCHANGE;
                EXCHANGE_PUBLISH();
                if (atomic_compare_exchange_strong(&exchange[e], &expected, tcm_to_offset(live[i])))
                    live[i] = NULL;
            }
        } else { /* take whatever someone published */
            size_t e = rnd(&seed) % EXCHANGE;
            uint64_t off = atomic_exchange(&exchange[e], 0);
            EXCHANGE_TAKE();
            if (off)
                check_and_free(tcm_from_offset(off));
        }
    }
    for (size_t i = 0; i < LIVE; i++)
        if (live[i])
            check_and_free(live[i]);
    return NULL;
}

static int run_proc(void *arg)
{
    proc_id = (int)(intptr_t)arg;
    CHECK_EQ(tcm_init(NULL), 0);
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    tcm_shutdown();
    return 0;
}

int main(void)
{
    tcm_test_daemon_t d;
    const char *args[] = {"--heap-size", "2G", NULL};
    tt_daemon_start(&d, args);
    exchange = mmap(NULL, EXCHANGE * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(exchange != MAP_FAILED);
    pid_t pids[PROCS];
    for (int p = 0; p < PROCS; p++)
        pids[p] = tt_fork(run_proc, (void *)(intptr_t)(p + 1));
    for (int p = 0; p < PROCS; p++)
        tt_wait_ok(pids[p], 240000);

    /* what is still in the exchange was allocated by processes that are
     * gone: this process verifies and frees it */
    CHECK_EQ(tcm_init(d.socket), 0);
    int left = 0;
    for (size_t e = 0; e < EXCHANGE; e++) {
        uint64_t off = atomic_exchange(&exchange[e], 0);
        if (off) {
            check_and_free(tcm_from_offset(off));
            left++;
        }
    }
    tcm_shutdown();
    tt_check_all_back(&d);
    printf("stress: %d procs x %d threads x %d ops, %d handed over at exit\n", PROCS,
           THREADS, OPS, left);
    tt_daemon_stop(&d);
    return 0;
}
