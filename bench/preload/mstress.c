/* mstress.c — threads that come and go with objects that outlive them: the
 * behaviour of mimalloc's test-stress (mstressN in mimalloc-bench, which
 * runs it as `mstress NPROC 50 25`), written for tcm's bench.
 *
 *   mstress [THREADS [SCALE [ROUNDS]]]   (default: online CPUs, 50, 25)
 *
 * Each round creates THREADS threads and joins them. Thread t makes
 * 100 * SCALE * (t % 8 + 1) short-lived objects and half as many retained
 * ones, in random order; after each step it may free one of its short-lived
 * objects (2 in 3) and may swap one with a random slot of a table shared by
 * all threads (1 in 4), so objects are freed by threads other than the one
 * that made them, and in later rounds. Short-lived objects are 1-16 words
 * (a power of two), retained ones 1-64; about 2% of them are 100 times
 * larger, and of those about 2% 10 000 times and 11% 1 000 times (up to a
 * few MiB). Every object is calloc'd, each word written with a value
 * derived from its length and position, and every word checked before it
 * is freed. A thread frees what it still holds before it exits; between
 * rounds the main thread frees about half of the shared table (all of it
 * after the last round), so the rest survives into the next round's
 * threads. The pseudo-random choices are seeded per thread and per round
 * and do not depend on the allocator (the interleaving of threads does).
 *
 * bench/run_preload.sh runs it under each allocator's LD_PRELOAD;
 * bench/mstress.c builds the same workload against libtcm (tcm-bench-mstress).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* the allocator under test: the process's malloc unless a harness that
 * includes this file points these elsewhere (bench/mstress.c) */
static struct {
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void (*free)(void *);
} ms_alloc = {calloc, realloc, free};

enum { SHARED_SLOTS = 1000, DATA_CHUNK = 100000 };
#define WORD_MARK 0x6a09e667f3bcc909ull

static _Atomic(uint64_t *) ms_shared[SHARED_SLOTS];
static int ms_scale = 50;

/* splitmix64: cheap and well mixed, so that the low bits used for the
 * percentages and the size picks are as random as the high ones */
static uint64_t next_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* true with a chance of (percent + 1) in 100: test-stress compares
 * `% 100 <= percent`, and the size mix above is its mix */
static int chance(uint64_t *state, unsigned percent)
{
    return next_rand(state) % 100 <= percent;
}

static uint64_t *make_object(uint64_t words, uint64_t *state)
{
    if (chance(state, 1)) { /* the rare large ones */
        if (chance(state, 1))
            words *= 10000;
        else if (chance(state, 10))
            words *= 1000;
        else
            words *= 100;
    }
    if (words == 40)
        words = 41; /* as test-stress does: 320 B is the size glibc's threads grow their stacks' TLS by */
    uint64_t *p = ms_alloc.calloc(words, sizeof *p);
    if (!p) {
        fprintf(stderr, "mstress: out of memory for %llu words\n", (unsigned long long)words);
        exit(1);
    }
    for (uint64_t i = 0; i < words; i++)
        p[i] = (words - i) ^ WORD_MARK;
    return p;
}

static void check_and_free(uint64_t *p)
{
    if (!p)
        return;
    uint64_t words = p[0] ^ WORD_MARK;
    for (uint64_t i = 0; i < words; i++)
        if ((p[i] ^ WORD_MARK) != words - i) {
            fprintf(stderr, "mstress: object %p damaged at word %llu of %llu\n", (void *)p, (unsigned long long)i,
                    (unsigned long long)words);
            abort();
        }
    ms_alloc.free(p);
}

typedef struct {
    long tid;
    int round;
} ms_job_t;

static void *ms_thread(void *arg)
{
    const ms_job_t *job = arg;
    uint64_t state = 0x2545f4914f6cdd1dull * (uint64_t)(job->tid + 1) + (uint64_t)job->round * 0x100000001b3ull;
    uint64_t to_make = 100ull * (uint64_t)ms_scale * (uint64_t)(job->tid % 8 + 1); /* some threads do more */
    uint64_t to_retain = to_make / 2;
    uint64_t **retained = ms_alloc.calloc(to_retain ? to_retain : 1, sizeof *retained);
    uint64_t **data = NULL;
    size_t ndata = 0, data_cap = 0, nretained = 0;
    if (!retained) {
        fprintf(stderr, "mstress: out of memory\n");
        exit(1);
    }
    while (to_make || to_retain) {
        if (!to_retain || (to_make && chance(&state, 50))) {
            to_make--;
            if (ndata == data_cap) {
                data_cap += DATA_CHUNK;
                data = ms_alloc.realloc(data, data_cap * sizeof *data);
                if (!data) {
                    fprintf(stderr, "mstress: out of memory\n");
                    exit(1);
                }
            }
            data[ndata++] = make_object(1ull << (next_rand(&state) % 5), &state);
        } else {
            to_retain--;
            retained[nretained++] = make_object(1ull << (next_rand(&state) % 7), &state);
        }
        if (chance(&state, 66) && ndata) {
            size_t i = next_rand(&state) % ndata;
            check_and_free(data[i]);
            data[i] = NULL;
        }
        if (chance(&state, 25) && ndata) { /* hand one to whichever thread takes that slot next */
            size_t i = next_rand(&state) % ndata;
            data[i] = atomic_exchange(&ms_shared[next_rand(&state) % SHARED_SLOTS], data[i]);
        }
    }
    for (size_t i = 0; i < nretained; i++)
        check_and_free(retained[i]);
    for (size_t i = 0; i < ndata; i++)
        check_and_free(data[i]);
    ms_alloc.free(retained);
    ms_alloc.free(data);
    return NULL;
}

/* One whole run: ROUNDS rounds of THREADS threads; everything is freed at
 * the end. A damaged object aborts; returns non-zero if a thread could not
 * be created. */
static int ms_run(int threads, int scale, int rounds)
{
    pthread_t *th = malloc((size_t)threads * sizeof *th);
    ms_job_t *jobs = malloc((size_t)threads * sizeof *jobs);
    uint64_t state = 0x853c49e6748fea9bull;
    if (!th || !jobs)
        return 1;
    ms_scale = scale;
    for (int r = 0; r < rounds; r++) {
        for (int t = 0; t < threads; t++) {
            jobs[t] = (ms_job_t){.tid = t, .round = r};
            if (pthread_create(&th[t], NULL, ms_thread, &jobs[t]) != 0) {
                fprintf(stderr, "mstress: cannot create thread %d\n", t);
                return 1;
            }
        }
        for (int t = 0; t < threads; t++)
            pthread_join(th[t], NULL);
        for (int i = 0; i < SHARED_SLOTS; i++) /* about half survive into the next round */
            if (r + 1 == rounds || chance(&state, 50))
                check_and_free(atomic_exchange(&ms_shared[i], NULL));
    }
    free(th);
    free(jobs);
    return 0;
}

#ifndef MSTRESS_NO_MAIN
int main(int argc, char **argv)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = argc > 1 ? atoi(argv[1]) : (int)(cpus > 0 ? cpus : 1);
    int scale = argc > 2 ? atoi(argv[2]) : 50;
    int rounds = argc > 3 ? atoi(argv[3]) : 25;
    if (threads < 1 || scale < 1 || rounds < 1) {
        fprintf(stderr, "usage: mstress [THREADS [SCALE [ROUNDS]]]\n");
        return 2;
    }
    int rc = ms_run(threads, scale, rounds);
    printf("mstress: %d threads, scale %d, %d rounds: %s\n", threads, scale, rounds, rc ? "FAILED" : "ok");
    return rc;
}
#endif
