/* multiproc.c — tcm-bench-multiproc: K processes x T threads running the
 * seed workload on the one shared heap.
 *
 * Every worker thread loops { allocate BATCH objects of SIZE bytes, write
 * the first byte of each, free them all } for PAIRS pairs, after a warm-up
 * of min(4096, PAIRS) pairs; all K*T workers of all processes then wait on
 * one process-shared barrier and are released together. The parent takes
 * the time around the go and done barriers (the total), and each process
 * takes its own (go to its last thread's end), so both the throughput of
 * all processes together and that of each one are reported.
 *
 * With --alloc tcm each forked process attaches to the harness's private
 * tcmd; the daemon's "requests" counter is read before and after the timed
 * part, so SIZE > 256 KiB with BATCH 1 (every pair a page-run round trip to
 * the daemon) measures the daemon's request throughput against the number
 * of client processes. --alloc SYSTEM runs the same processes on their own
 * private malloc, as a reference.
 *
 * CSV: allocator,procs,threads,size,batch,pairs,median_s,min_s,max_s,
 *      mpairs_total,mpairs_per_proc_mean,mpairs_per_proc_min,requests_per_s,ns_per_pair_worker */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "tcm.h"

#define MAX_PROCS 256

typedef struct {
    pthread_barrier_t ready, go, done;
    _Atomic int failed;
    _Atomic uint64_t checksum;
    double proc_s[MAX_PROCS];
} shared_t;

typedef struct {
    size_t size, batch, threads;
    uint64_t pairs;
    const bench_alloc_t *a;
    shared_t *s;
} cfg_t;

static int batch_loop(const cfg_t *c, void **p, uint64_t pairs)
{
    uintptr_t sum = 0;
    int rc = bench_batch_loop(c->a, c->size, c->batch, pairs, p, &sum);
    atomic_fetch_add_explicit(&c->s->checksum, sum, memory_order_relaxed);
    return rc;
}

/* A thread's batch array, warmed up with (at most) 4096 pairs; *failed
 * if either went wrong. */
static void **warm_up(const cfg_t *c, int *failed)
{
    void **p = calloc(c->batch, sizeof *p);
    *failed = !p;
    uint64_t warm = c->pairs < 4096 ? c->pairs : 4096;
    if (!*failed)
        *failed = batch_loop(c, p, warm) != 0;
    return p;
}

static void *worker(void *arg)
{
    const cfg_t *c = arg;
    int failed;
    void **p = warm_up(c, &failed);
    pthread_barrier_wait(&c->s->ready);
    pthread_barrier_wait(&c->s->go);
    if (!failed)
        failed = batch_loop(c, p, c->pairs) != 0;
    if (failed)
        atomic_store(&c->s->failed, 1);
    free(p);
    return NULL;
}

/* One process: T threads (the first is this one); returns when all are done. */
static void process_main(const cfg_t *c, int idx, int attach)
{
    if (attach && tcm_init(NULL) != 0)
        atomic_store(&c->s->failed, 1);
    pthread_t tid[64];
    size_t started = 1;
    for (; started < c->threads; started++)
        if (pthread_create(&tid[started], NULL, worker, (void *)c) != 0) {
            fprintf(stderr, "bench: pthread_create failed\n");
            _exit(1);
        }
    /* time from the go barrier: the leader thread waits on it too */
    int failed;
    void **p = warm_up(c, &failed);
    pthread_barrier_wait(&c->s->ready);
    pthread_barrier_wait(&c->s->go);
    double t0 = bench_now();
    if (!failed)
        failed = batch_loop(c, p, c->pairs) != 0;
    for (size_t i = 1; i < c->threads; i++)
        pthread_join(tid[i], NULL);
    c->s->proc_s[idx] = bench_now() - t0;
    if (failed)
        atomic_store(&c->s->failed, 1);
    free(p);
    pthread_barrier_wait(&c->s->done);
    if (attach)
        tcm_shutdown();
}

static unsigned timeout_s = 300;

typedef struct {
    double total_s, proc_mean_s, proc_max_s;
    double requests;
} result_t;

static int run_once(cfg_t *c, int procs, bench_daemon_t *d, result_t *res)
{
    shared_t *s = c->s;
    unsigned n = (unsigned)(procs * (int)c->threads) + 1;
    pthread_barrierattr_t attr;
    pthread_barrierattr_init(&attr);
    pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&s->ready, &attr, n);
    pthread_barrier_init(&s->go, &attr, n);
    pthread_barrier_init(&s->done, &attr, (unsigned)procs + 1);
    pthread_barrierattr_destroy(&attr);
    atomic_store(&s->failed, 0);
    int is_tcm = strcmp(c->a->name, "tcm") == 0;
    pid_t pid[MAX_PROCS];
    for (int i = 0; i < procs; i++) {
        if ((pid[i] = bench_fork()) == 0) {
            process_main(c, i, is_tcm);
            _exit(0);
        }
    }
    alarm(timeout_s);
    pthread_barrier_wait(&s->ready);
    int64_t r0 = is_tcm ? bench_daemon_query(d, "stats", "requests") : -1;
    double t0 = bench_now();
    pthread_barrier_wait(&s->go);
    pthread_barrier_wait(&s->done);
    double t1 = bench_now();
    int64_t r1 = is_tcm ? bench_daemon_query(d, "stats", "requests") : -1;
    alarm(0);
    int failed = atomic_load(&s->failed);
    for (int i = 0; i < procs; i++) {
        int status;
        waitpid(pid[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "bench: process %d ended with status 0x%x\n", i, status);
            failed = 1;
        }
    }
    pthread_barrier_destroy(&s->ready);
    pthread_barrier_destroy(&s->go);
    pthread_barrier_destroy(&s->done);
    res->total_s = t1 - t0;
    res->proc_mean_s = 0;
    res->proc_max_s = 0;
    for (int i = 0; i < procs; i++) {
        res->proc_mean_s += s->proc_s[i] / procs;
        if (s->proc_s[i] > res->proc_max_s)
            res->proc_max_s = s->proc_s[i];
    }
    /* the queries themselves count one request each at most; negligible */
    res->requests = r0 >= 0 && r1 >= r0 ? (double)(r1 - r0) : -1;
    return failed ? -1 : 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tcm-bench-multiproc [--procs K] [--threads T] [--size S] [--batch N] [--pairs P]\n"
               "                           [--runs R] [--alloc tcm|SYSTEM] [--csv] [--tcmd PATH]\n"
               "                           [--tcmd-arg ARG]... [--timeout SEC] [--verbose]\n"
               "  P pairs per thread. --tcmd-arg passes ARG to the private tcmd (e.g. --heap-size 64G\n"
               "  as --tcmd-arg=--heap-size --tcmd-arg=64G).\n"
               "  CSV: allocator,procs,threads,size,batch,pairs,median_s,min_s,max_s,mpairs_total,\n"
               "       mpairs_per_proc_mean,mpairs_per_proc_min,requests_per_s,ns_per_pair_worker\n");
}

int main(int argc, char **argv)
{
    cfg_t c = {.size = 64, .batch = 64, .threads = 1, .pairs = 1000000};
    int procs = 2;
    bench_opts_t o = BENCH_OPTS_DEFAULT;
    const char *alloc = "tcm";
    enum { O_PROCS = 256, O_THREADS, O_SIZE, O_BATCH, O_PAIRS, O_ALLOC };
    static const struct option opts[] = {
        {"procs", required_argument, 0, O_PROCS}, {"threads", required_argument, 0, O_THREADS},
        {"size", required_argument, 0, O_SIZE}, {"batch", required_argument, 0, O_BATCH},
        {"pairs", required_argument, 0, O_PAIRS}, {"alloc", required_argument, 0, O_ALLOC},
        BENCH_COMMON_OPTIONS,
    };
    for (int opt; (opt = bench_getopt(argc, argv, opts, &o)) != -1;) {
        switch (opt) {
        case O_PROCS: procs = (int)bench_parse_size("--procs", optarg); break;
        case O_THREADS: c.threads = bench_parse_size("--threads", optarg); break;
        case O_SIZE: c.size = bench_parse_size("--size", optarg); break;
        case O_BATCH: c.batch = bench_parse_size("--batch", optarg); break;
        case O_PAIRS: c.pairs = bench_parse_size("--pairs", optarg); break;
        case O_ALLOC: alloc = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || procs < 1 || procs > MAX_PROCS || c.threads < 1 || c.threads > 64 || !c.size ||
        !c.batch || !c.pairs || !bench_runs_ok(&o)) {
        usage(stderr);
        return 2;
    }
    timeout_s = o.timeout_s;
    c.a = bench_alloc_named(alloc);
    bench_check_system_malloc();
    bench_timeout_init("a multiproc run");
    bench_daemon_t daemon = {0};
    if (strcmp(c.a->name, "tcm") == 0)
        bench_daemon_start(&daemon, o.tcmd);
    c.s = mmap(NULL, sizeof *c.s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c.s == MAP_FAILED) {
        perror("bench: mmap");
        return 1;
    }

    double total[BENCH_MAX_RUNS], mean[BENCH_MAX_RUNS], worst[BENCH_MAX_RUNS], reqs[BENCH_MAX_RUNS];
    int rc = 0;
    for (int r = 0; r < o.runs; r++) {
        result_t res;
        if (run_once(&c, procs, &daemon, &res) != 0) {
            fprintf(stderr, "bench: %s: multiproc run failed (procs %d threads %zu size %zu)\n", c.a->name,
                    procs, c.threads, c.size);
            rc = 1;
            goto out;
        }
        total[r] = res.total_s;
        mean[r] = res.proc_mean_s;
        worst[r] = res.proc_max_s;
        reqs[r] = res.requests >= 0 ? res.requests / res.total_s : -1;
        if (o.verbose)
            fprintf(stderr, "run %d %s: %.6f s (per process mean %.6f, max %.6f), %.0f requests/s\n", r + 1,
                    c.a->name, res.total_s, res.proc_mean_s, res.proc_max_s, reqs[r]);
    }
    {
        bench_stats_t st = bench_stats(total, o.runs), sm = bench_stats(mean, o.runs), sw = bench_stats(worst, o.runs),
                      sr = bench_stats(reqs, o.runs);
        double per_thread = (double)c.pairs * (double)c.threads;
        double mps = per_thread * procs / st.median / 1e6;
        double ns = st.median * 1e9 / (double)c.pairs; /* per pair, as one worker sees it */
        if (o.csv)
            printf("%s,%d,%zu,%zu,%zu,%llu,%.6f,%.6f,%.6f,%.3f,%.3f,%.3f,%.0f,%.1f\n", c.a->name, procs, c.threads,
                   c.size, c.batch, (unsigned long long)c.pairs, st.median, st.min, st.max, mps,
                   per_thread / sm.median / 1e6, per_thread / sw.median / 1e6, sr.median, ns);
        else
            printf("%-9s procs %-3d threads %-2zu size %-7zu batch %-5zu pairs %-9llu  median %.4f s (%.4f-%.4f)"
                   "  %.2f Mpairs/s total, %.2f per process (slowest %.2f), %.0f requests/s, %.1f ns/pair\n",
                   c.a->name, procs, c.threads, c.size, c.batch, (unsigned long long)c.pairs, st.median, st.min,
                   st.max, mps, per_thread / sm.median / 1e6, per_thread / sw.median / 1e6, sr.median, ns);
    }
out:
    fflush(stdout);
    munmap(c.s, sizeof *c.s);
    bench_daemon_stop(&daemon);
    return rc;
}
