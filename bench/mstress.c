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
    int threads = 32, scale = 10, rounds = 10, runs = 5;
    const char *alloc_list = "all", *tcmd = NULL;
    static const struct option opts[] = {{"threads", required_argument, 0, 't'}, {"scale", required_argument, 0, 's'},
                                         {"rounds", required_argument, 0, 'i'},  {"runs", required_argument, 0, 'r'},
                                         {"alloc", required_argument, 0, 'a'},   {"tcmd", required_argument, 0, 'd'},
                                         {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 't': threads = atoi(optarg); break;
        case 's': scale = atoi(optarg); break;
        case 'i': rounds = atoi(optarg); break;
        case 'r': runs = atoi(optarg); break;
        case 'a': alloc_list = optarg; break;
        case 'd': tcmd = optarg; break;
        default:
            fprintf(stderr, "usage: tcm-bench-mstress [--threads T] [--scale S] [--rounds N] [--runs R] "
                            "[--alloc tcm,NAME|all]\n");
            return 2;
        }
    }
    if (threads < 1 || threads > 1024 || scale < 1 || rounds < 1 || runs < 1 || runs > BENCH_MAX_RUNS)
        return 2;
    size_t nall, idx[8];
    const bench_alloc_t *all = bench_allocs(&nall);
    bench_daemon_t daemon = {0};
    size_t n = bench_setup(alloc_list, idx, 8, &daemon, tcmd);
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
