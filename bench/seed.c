/* seed.c — tcm-bench-seed: the seed document's workload and method
 * (sections 10.2-10.5), so that its figures and its two reversals can be
 * compared with tcm's.
 *
 * Each worker thread loops { allocate BATCH objects of SIZE bytes, write the
 * first byte of each, free them all } until PAIRS allocation+free pairs are
 * done. It first warms up on min(4096, PAIRS) pairs on the same thread, so
 * its own thread cache is in steady state; then all workers wait on a
 * barrier. The main thread takes the time, releases them together and takes
 * the time again once all are done. Threads are joined only after that, so
 * the flush of their caches at thread exit is not timed (as in the seed).
 * Every case runs RUNS times; the order of the allocators flips every run,
 * and the median with min and max is reported. */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"

typedef struct {
    size_t size, threads, batch;
    uint64_t pairs;
    int runs;
    unsigned timeout_s;
} config_t;

typedef struct {
    const bench_alloc_t *a;
    const config_t *cfg;
    void **ptrs; /* the batch in flight */
    uintptr_t checksum;
    int failed;
} worker_t;

static pthread_barrier_t ready_bar, go_bar, done_bar;
static volatile uintptr_t sink; /* addresses feed it so no call is dead */

static int batch_loop(worker_t *w, uint64_t pairs)
{
    uintptr_t sum = 0;
    int rc = bench_batch_loop(w->a, w->cfg->size, w->cfg->batch, pairs, w->ptrs, &sum);
    w->checksum += sum;
    return rc;
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    uint64_t warm = w->cfg->pairs < 4096 ? w->cfg->pairs : 4096;
    w->failed = batch_loop(w, warm) != 0;
    pthread_barrier_wait(&ready_bar);
    pthread_barrier_wait(&go_bar);
    if (!w->failed)
        w->failed = batch_loop(w, w->cfg->pairs) != 0;
    pthread_barrier_wait(&done_bar);
    return NULL;
}

/* One timed run: seconds, or a negative value if an allocation failed. */
static double run_once(const bench_alloc_t *a, const config_t *cfg)
{
    size_t t = cfg->threads;
    pthread_t *tid = calloc(t, sizeof *tid);
    worker_t *w = calloc(t, sizeof *w);
    if (!tid || !w) {
        perror("bench: calloc");
        exit(1);
    }
    pthread_barrier_init(&ready_bar, NULL, (unsigned)t + 1);
    pthread_barrier_init(&go_bar, NULL, (unsigned)t + 1);
    pthread_barrier_init(&done_bar, NULL, (unsigned)t + 1);
    for (size_t i = 0; i < t; i++) {
        w[i] = (worker_t){.a = a, .cfg = cfg, .ptrs = calloc(cfg->batch, sizeof(void *))};
        if (!w[i].ptrs || pthread_create(&tid[i], NULL, worker, &w[i]) != 0) {
            fprintf(stderr, "bench: cannot start worker %zu\n", i);
            exit(1);
        }
    }
    alarm(cfg->timeout_s); /* a hang in an allocator must not hang the suite */
    pthread_barrier_wait(&ready_bar);
    double t0 = bench_now();
    pthread_barrier_wait(&go_bar);
    pthread_barrier_wait(&done_bar);
    double t1 = bench_now();
    alarm(0);
    int failed = 0;
    for (size_t i = 0; i < t; i++) {
        pthread_join(tid[i], NULL);
        failed |= w[i].failed;
        sink += w[i].checksum;
        free(w[i].ptrs);
    }
    pthread_barrier_destroy(&ready_bar);
    pthread_barrier_destroy(&go_bar);
    pthread_barrier_destroy(&done_bar);
    free(tid);
    free(w);
    return failed ? -1 : t1 - t0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tcm-bench-seed [--size S] [--threads T] [--batch N] [--pairs P] [--runs R]\n"
               "                      [--alloc tcm,NAME|all] [--csv] [--tcmd PATH] [--timeout SEC]\n"
               "                      [--verbose]\n"
               "  P pairs (allocation + free) per thread, N objects held per batch.\n"
               "  CSV: allocator,size,threads,batch,pairs,median_s,min_s,max_s,mpairs_per_s\n");
}

int main(int argc, char **argv)
{
    config_t cfg = {.size = 64, .threads = 1, .batch = 64, .pairs = 1000000};
    const char *alloc_list = "all";
    bench_opts_t o = BENCH_OPTS_DEFAULT;
    enum { O_SIZE = 256, O_THREADS, O_BATCH, O_PAIRS, O_ALLOC };
    static const struct option opts[] = {
        {"size", required_argument, 0, O_SIZE}, {"threads", required_argument, 0, O_THREADS},
        {"batch", required_argument, 0, O_BATCH}, {"pairs", required_argument, 0, O_PAIRS},
        {"alloc", required_argument, 0, O_ALLOC},
        BENCH_COMMON_OPTIONS,
    };
    for (int opt; (opt = bench_getopt(argc, argv, opts, &o)) != -1;) {
        switch (opt) {
        case O_SIZE: cfg.size = bench_parse_size("--size", optarg); break;
        case O_THREADS: cfg.threads = bench_parse_size("--threads", optarg); break;
        case O_BATCH: cfg.batch = bench_parse_size("--batch", optarg); break;
        case O_PAIRS: cfg.pairs = bench_parse_size("--pairs", optarg); break;
        case O_ALLOC: alloc_list = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || !cfg.size || !cfg.threads || cfg.threads > 1024 || !cfg.batch || !cfg.pairs ||
        !bench_runs_ok(&o)) {
        usage(stderr);
        return 2;
    }
    cfg.runs = o.runs;
    cfg.timeout_s = o.timeout_s;

    size_t nall, idx[8];
    const bench_alloc_t *all = bench_allocs(&nall);
    bench_timeout_init("a seed run");
    bench_daemon_t daemon = {0};
    size_t n = bench_setup(alloc_list, idx, 8, &daemon, o.tcmd);

    double t[8][BENCH_MAX_RUNS];
    int rc = 0;
    for (int r = 0; r < cfg.runs; r++) {
        for (size_t k = 0; k < n; k++) {
            size_t j = r % 2 ? n - 1 - k : k; /* the seed's alternating order */
            t[j][r] = run_once(&all[idx[j]], &cfg);
            if (o.verbose)
                fprintf(stderr, "run %d %s: %.6f s\n", r + 1, all[idx[j]].name, t[j][r]);
            if (t[j][r] < 0) {
                fprintf(stderr, "bench: %s: allocation failed (size %zu, threads %zu, batch %zu)\n",
                        all[idx[j]].name, cfg.size, cfg.threads, cfg.batch);
                rc = 1;
                goto out;
            }
        }
    }
    for (size_t k = 0; k < n; k++) {
        bench_stats_t s = bench_stats(t[k], cfg.runs);
        double mps = (double)cfg.pairs * (double)cfg.threads / s.median / 1e6;
        if (o.csv)
            printf("%s,%zu,%zu,%zu,%llu,%.6f,%.6f,%.6f,%.3f\n", all[idx[k]].name, cfg.size, cfg.threads,
                   cfg.batch, (unsigned long long)cfg.pairs, s.median, s.min, s.max, mps);
        else
            printf("%-9s size %-6zu threads %-3zu batch %-5zu pairs %-9llu  median %.4f s (%.4f-%.4f)"
                   "  %.2f Mpairs/s\n",
                   all[idx[k]].name, cfg.size, cfg.threads, cfg.batch, (unsigned long long)cfg.pairs, s.median,
                   s.min, s.max, mps);
    }
out:
    fflush(stdout);
    bench_daemon_stop(&daemon);
    return rc;
}
