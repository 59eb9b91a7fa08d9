/* tcm-bench-mstress — bench/preload/mstress.c's workload (the behaviour of
 * mimalloc's test-stress: threads re-created round after round, objects
 * crossing threads and rounds, every word checked) linked against libtcm,
 * tcm and this binary's system malloc alternating in one process, median
 * of runs. The figure is 32 threads, scale 10, 10 rounds:
 *   --threads 32 --scale 10 --rounds 10 --runs 5 --alloc all
 * Output: a line per allocator with the median seconds, and tcm's heap
 * bytes committed at the end of its last run. */
#define _GNU_SOURCE
#include <getopt.h>
#include <string.h>

#define MSTRESS_NO_MAIN
#include "preload/mstress.c"

#include "bench_util.h"
#include "tcm.h"

int main(int argc, char **argv)
{
    int threads = 32, scale = 10, rounds = 10;
    bench_opts_t o = BENCH_OPTS_DEFAULT;
    const char *alloc_list = "all";
    enum { O_THREADS = 256, O_SCALE, O_ROUNDS, O_ALLOC };
    static const struct option opts[] = {
        {"threads", required_argument, 0, O_THREADS}, {"scale", required_argument, 0, O_SCALE},
        {"rounds", required_argument, 0, O_ROUNDS}, {"alloc", required_argument, 0, O_ALLOC},
        BENCH_COMMON_OPTIONS,
    };
    for (int opt; (opt = bench_getopt(argc, argv, opts, &o)) != -1;) {
        switch (opt) {
        case O_THREADS: threads = atoi(optarg); break;
        case O_SCALE: scale = atoi(optarg); break;
        case O_ROUNDS: rounds = atoi(optarg); break;
        case O_ALLOC: alloc_list = optarg; break;
        default:
            fprintf(stderr, "usage: tcm-bench-mstress [--threads T] [--scale S] [--rounds N] [--runs R] "
                            "[--alloc tcm,NAME|all]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 1024 || scale < 1 || rounds < 1 || !bench_runs_ok(&o))
        return 2;
    int runs = o.runs;
    size_t nall, idx[8];
    const bench_alloc_t *all = bench_allocs(&nall);
    bench_daemon_t daemon = {0};
    size_t n = bench_setup(alloc_list, idx, 8, &daemon, o.tcmd);
    double t[8][BENCH_MAX_RUNS];
    int64_t committed = -1;
    for (int r = 0; r < runs; r++)
        for (size_t k = 0; k < n; k++) {
            size_t j = r % 2 ? n - 1 - k : k;
            const char *name = all[idx[j]].name;
            if (strcmp(name, "tcm") == 0) {
                ms_alloc.calloc = tcm_calloc;
                ms_alloc.realloc = tcm_realloc;
                ms_alloc.free = tcm_free;
            } else {
                ms_alloc.calloc = calloc;
                ms_alloc.realloc = realloc;
                ms_alloc.free = free;
            }
            double t0 = bench_now();
            if (ms_run(threads, scale, rounds) != 0) {
                bench_daemon_stop(&daemon);
                return 1;
            }
            t[j][r] = bench_now() - t0;
            if (strcmp(name, "tcm") == 0)
                committed = bench_daemon_query(&daemon, "stats", "bytes_committed");
        }
    for (size_t k = 0; k < n; k++) {
        bench_stats_t s = bench_stats(t[k], runs);
        printf("%-9s %d threads x %d rounds, scale %d: median %.3f s (%.3f-%.3f)", all[idx[k]].name, threads, rounds,
               scale, s.median, s.min, s.max);
        if (strcmp(all[idx[k]].name, "tcm") == 0 && committed >= 0)
            printf(", heap committed after the last run %.1f MB", (double)committed / 1e6);
        printf("\n");
    }
    bench_daemon_stop(&daemon);
    return 0;
}
