/* tcm-bench-churn — threads that come and go: ITER rounds of T threads
 * created and joined; each thread allocates objects of 8 B to 2 KiB (a
 * cookie written at allocation, checked at free), frees some of its own,
 * and passes a quarter of them to other threads through a shared array of
 * slots (taking and freeing what another thread left there). The shape of
 * a well-known allocator stress test (threads created and joined 10 times,
 * objects crossing threads). Alternates the allocators, median of runs.
 *   --threads 32 --iter 10 --ops 50000 --runs 3 --alloc all
 * Output: a line per allocator with the median seconds. */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

#define TRANSFER 1000
#define LIVE 1000

typedef struct {
    const bench_alloc_t *a;
    uint64_t seed, ops;
    int failed;
} job_t;

static _Atomic(uint64_t *) transfer[TRANSFER];

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t *make(const bench_alloc_t *a, uint64_t *seed)
{
    size_t words = 1 + rnd(seed) % 256; /* 8 B .. 2 KiB */
    uint64_t *p = a->alloc(words * 8);
    if (!p)
        return NULL;
    p[0] = words;
    p[words - 1] = words ^ (uintptr_t)p; /* a second cookie at the end (words 1: the same word) */
    if (words == 1)
        p[0] = 1;
    return p;
}

static int check_free(const bench_alloc_t *a, uint64_t *p)
{
    uint64_t words = p[0];
    int bad = words < 1 || words > 256 || (words > 1 && p[words - 1] != (words ^ (uintptr_t)p));
    a->release(p);
    return bad;
}

static void *worker(void *arg)
{
    job_t *j = arg;
    uint64_t *live[LIVE] = {0};
    for (uint64_t i = 0; i < j->ops; i++) {
        size_t k = rnd(&j->seed) % LIVE;
        uint64_t r = rnd(&j->seed) % 4;
        if (live[k] && r == 0) { /* a quarter cross to another thread */
            uint64_t *old = atomic_exchange(&transfer[rnd(&j->seed) % TRANSFER], live[k]);
            if (old)
                j->failed |= check_free(j->a, old);
        } else if (live[k]) {
            j->failed |= check_free(j->a, live[k]);
        }
        live[k] = make(j->a, &j->seed);
        if (!live[k])
            j->failed = 1;
    }
    for (size_t k = 0; k < LIVE; k++)
        if (live[k])
            j->failed |= check_free(j->a, live[k]);
    return NULL;
}

static double run_once(const bench_alloc_t *a, int threads, int iters, uint64_t ops)
{
    pthread_t *t = calloc((size_t)threads, sizeof *t);
    job_t *jobs = calloc((size_t)threads, sizeof *jobs);
    int failed = 0;
    double t0 = bench_now();
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < threads; i++) {
            jobs[i] = (job_t){.a = a, .seed = 0x9e3779b97f4a7c15ull * (uint64_t)(it * threads + i + 1), .ops = ops};
            pthread_create(&t[i], NULL, worker, &jobs[i]);
        }
        for (int i = 0; i < threads; i++) {
            pthread_join(t[i], NULL);
            failed |= jobs[i].failed;
        }
    }
    for (size_t k = 0; k < TRANSFER; k++) {
        uint64_t *p = atomic_exchange(&transfer[k], NULL);
        if (p)
            failed |= check_free(a, p);
    }
    double dt = bench_now() - t0;
    free(t);
    free(jobs);
    return failed ? -1 : dt;
}

int main(int argc, char **argv)
{
    int threads = 32, iters = 10;
    bench_opts_t o = BENCH_OPTS_DEFAULT;
    o.runs = 3;
    uint64_t ops = 50000;
    const char *alloc_list = "all";
    enum { O_THREADS = 256, O_ITER, O_OPS, O_ALLOC };
    static const struct option opts[] = {
        {"threads", required_argument, 0, O_THREADS}, {"iter", required_argument, 0, O_ITER},
        {"ops", required_argument, 0, O_OPS}, {"alloc", required_argument, 0, O_ALLOC},
        BENCH_COMMON_OPTIONS,
    };
    for (int opt; (opt = bench_getopt(argc, argv, opts, &o)) != -1;) {
        switch (opt) {
        case O_THREADS: threads = atoi(optarg); break;
        case O_ITER: iters = atoi(optarg); break;
        case O_OPS: ops = bench_parse_size("--ops", optarg); break;
        case O_ALLOC: alloc_list = optarg; break;
        default:
            fprintf(stderr, "usage: tcm-bench-churn [--threads T] [--iter N] [--ops N] [--runs R] [--alloc tcm,NAME|all]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 1024 || iters < 1 || !bench_runs_ok(&o))
        return 2;
    int runs = o.runs;
    size_t nall, idx[8];
    const bench_alloc_t *all = bench_allocs(&nall);
    bench_daemon_t daemon = {0};
    size_t n = bench_setup(alloc_list, idx, 8, &daemon, o.tcmd);
    double t[8][BENCH_MAX_RUNS];
    for (int r = 0; r < runs; r++)
        for (size_t k = 0; k < n; k++) {
            size_t j = r % 2 ? n - 1 - k : k;
            t[j][r] = run_once(&all[idx[j]], threads, iters, ops);
            if (t[j][r] < 0) {
                fprintf(stderr, "churn: %s: a bad object or a failed allocation\n", all[idx[j]].name);
                bench_daemon_stop(&daemon);
                return 1;
            }
        }
    for (size_t k = 0; k < n; k++) {
        bench_stats_t s = bench_stats(t[k], runs);
        printf("%-9s threads %d x %d rounds, %llu ops each: median %.3f s (%.3f-%.3f)\n", all[idx[k]].name, threads,
               iters, (unsigned long long)ops, s.median, s.min, s.max);
    }
    bench_daemon_stop(&daemon);
    return 0;
}
