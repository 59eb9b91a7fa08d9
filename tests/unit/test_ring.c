/* The MPSC ring and the doorbell, under many producer threads: every posted
 * value is consumed exactly once, and a consumer that sleeps with the
 * daemon's protocol is never left asleep with work pending. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ring.h"

#define PRODUCERS 8
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define PER_PRODUCER 20000 /* sanitizers make each push ~50x slower */
#else
#define PER_PRODUCER 200000
#endif
#define CAP 64

static tcm_ring_t *ring;
static tcm_bell_t bell;
static _Atomic uint32_t sleeping;
static _Atomic uint64_t sleeps;

static void *producer(void *arg)
{
    uint32_t id = (uint32_t)(uintptr_t)arg;
    for (uint32_t i = 0; i < PER_PRODUCER; i++) {
        uint32_t v = id * PER_PRODUCER + i;
        while (!tcm__ring_push(ring, CAP, v))
            tcm__cpu_relax(); /* full: the consumer is behind */
        tcm__bell_ring(&sleeping, &bell);
    }
    return NULL;
}

int main(void)
{
    ring = calloc(1, sizeof *ring + CAP * sizeof(tcm_ring_cell_t));
    tcm__ring_init(ring, CAP);
    uint8_t *seen = calloc(PRODUCERS * PER_PRODUCER, 1);
    uint32_t *last = calloc(PRODUCERS, sizeof *last);
    pthread_t t[PRODUCERS];
    for (uintptr_t i = 0; i < PRODUCERS; i++)
        pthread_create(&t[i], NULL, producer, (void *)i);

    uint64_t tail = 0, got = 0;
    while (got < (uint64_t)PRODUCERS * PER_PRODUCER) {
        uint32_t v;
        if (tcm__ring_peek(ring, CAP, tail, &v)) { /* as the heap thread serves a cell: read, then release */
            tcm__ring_release(ring, CAP, tail++);
            CHECK_LT(v, PRODUCERS * PER_PRODUCER);
            CHECK_EQ(seen[v], 0);
            seen[v] = 1;
            /* one producer's values come out in order */
            uint32_t p = v / PER_PRODUCER, i = v % PER_PRODUCER;
            CHECK(i == 0 || last[p] == i - 1);
            last[p] = i;
            got++;
            continue;
        }
        /* the heap thread's sleep: a 10 s wait that is woken late fails */
        uint32_t seq = atomic_load(&bell.seq);
        atomic_store(&sleeping, 1);
        atomic_thread_fence(memory_order_seq_cst);
        if (!tcm__ring_ready(ring, CAP, tail)) {
            uint64_t t0 = tcm__now_ns();
            tcm__wait(&bell.seq, seq, 10000000000ll);
            CHECK_LT(tcm__now_ns() - t0, 5000000000ull);
            sleeps++;
        }
        atomic_store(&sleeping, 0);
    }
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(t[i], NULL);
    uint32_t v;
    CHECK(!tcm__ring_peek(ring, CAP, tail, &v));
    /* a corrupt cell never yields a value */
    atomic_store(&ring->cells[tail & (CAP - 1)].seq, tail + 7);
    CHECK(!tcm__ring_peek(ring, CAP, tail, &v));
    printf("ring: %llu values, %llu sleeps\n", (unsigned long long)got,
           (unsigned long long)sleeps);
    free(ring);
    free(seen);
    free(last);
    return 0;
}
