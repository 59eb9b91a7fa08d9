/* hitpath.c — tcm-bench-hitpath: the thread-cache hit path, one
 * malloc + free pair at a time in a tight single-thread loop.
 *
 * Each pair allocates SIZE bytes, writes the first byte and frees the
 * object at once, so every call after the first hits the thread cache (or
 * whatever the allocator's fastest path is). The allocators are called
 * directly, not through a function pointer: tcm_malloc/tcm_free for tcm,
 * malloc/free for the binary's system allocator (glibc, or jemalloc,
 * tcmalloc, mimalloc replacing it; built once per allocator like
 * tcm-bench-seed). An empty asm keeps the compiler from folding the pair.
 *
 * Every (allocator, size) runs RUNS times after a warm-up of 4096 pairs;
 * the order of the allocators flips every run; the median ns per pair is
 * reported with min and max.
 *
 * Instructions per pair (bench/suite.py does this): run it under
 * `valgrind --tool=callgrind` with --runs 1 for P pairs and for 0 pairs (the
 * baseline: start-up, daemon attach, warm-up) and divide the difference of
 * the two totals by P. The loops are the noinline functions hit_loop_tcm and
 * hit_loop_system, so `--toggle-collect=hit_loop_*` also works.
 *
 * CSV: allocator,size,pairs,median_ns,min_ns,max_ns */
#define _GNU_SOURCE
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "tcm.h"

static volatile uintptr_t sink;

#define ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")

#define HIT_LOOP(name, ALLOC, FREE)                                                                            \
    __attribute__((noinline)) static int name(size_t size, uint64_t pairs)                                      \
    {                                                                                                          \
        uintptr_t sum = 0;                                                                                     \
        for (uint64_t i = 0; i < pairs; i++) {                                                                 \
            char *p = ALLOC(size);                                                                             \
            if (__builtin_expect(!p, 0))                                                                       \
                return -1;                                                                                     \
            p[0] = (char)i;                                                                                    \
            ESCAPE(p);                                                                                         \
            sum += (uintptr_t)p;                                                                               \
            FREE(p);                                                                                           \
        }                                                                                                      \
        sink += sum;                                                                                           \
        return 0;                                                                                              \
    }

HIT_LOOP(hit_loop_tcm, tcm_malloc, tcm_free)
HIT_LOOP(hit_loop_system, malloc, free)

static int hit_loop(const char *name, size_t size, uint64_t pairs)
{
    return strcmp(name, "tcm") == 0 ? hit_loop_tcm(size, pairs) : hit_loop_system(size, pairs);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tcm-bench-hitpath [--sizes S,S,...] [--pairs P] [--runs R] [--alloc tcm,NAME|all]\n"
               "                         [--no-warmup] [--csv] [--tcmd PATH] [--tcmd-arg ARG]... [--timeout SEC]\n"
               "  P malloc+free pairs per timed run (default 20000000); sizes default 16,64,256,4096.\n"
               "  CSV: allocator,size,pairs,median_ns,min_ns,max_ns (ns per pair)\n");
}

int main(int argc, char **argv)
{
    const char *sizes_arg = "16,64,256,4096", *alloc_list = "all";
    bench_opts_t o = BENCH_OPTS_DEFAULT;
    uint64_t pairs = 20000000;
    int warmup = 1;
    enum { O_SIZES = 256, O_PAIRS, O_ALLOC, O_NOWARM };
    static const struct option opts[] = {
        {"sizes", required_argument, 0, O_SIZES}, {"pairs", required_argument, 0, O_PAIRS},
        {"alloc", required_argument, 0, O_ALLOC}, {"no-warmup", no_argument, 0, O_NOWARM},
        BENCH_COMMON_OPTIONS,
    };
    for (int opt; (opt = bench_getopt(argc, argv, opts, &o)) != -1;) {
        switch (opt) {
        case O_SIZES: sizes_arg = optarg; break;
        case O_PAIRS: pairs = bench_parse_size("--pairs", optarg); break;
        case O_ALLOC: alloc_list = optarg; break;
        case O_NOWARM: warmup = 0; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || !bench_runs_ok(&o)) {
        usage(stderr);
        return 2;
    }
    size_t sizes[32], nsizes = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", sizes_arg);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && nsizes < 32;
         tok = strtok_r(NULL, ",", &save))
        sizes[nsizes++] = bench_parse_size("--sizes", tok);
    if (!nsizes) {
        usage(stderr);
        return 2;
    }

    size_t nall, idx[8];
    const bench_alloc_t *all = bench_allocs(&nall);
    bench_timeout_init("a hit-path run");
    bench_daemon_t daemon = {0};
    size_t n = bench_setup(alloc_list, idx, 8, &daemon, o.tcmd);

    int rc = 0;
    for (size_t s = 0; s < nsizes && !rc; s++) {
        double t[8][BENCH_MAX_RUNS];
        for (int r = 0; r < o.runs && !rc; r++) {
            for (size_t k = 0; k < n; k++) {
                size_t j = r % 2 ? n - 1 - k : k;
                const char *name = all[idx[j]].name;
                alarm(o.timeout_s);
                if (warmup)
                    rc |= hit_loop(name, sizes[s], 4096);
                double t0 = bench_now();
                rc |= hit_loop(name, sizes[s], pairs);
                double t1 = bench_now();
                alarm(0);
                if (rc) {
                    fprintf(stderr, "bench: %s: allocation of %zu bytes failed\n", name, sizes[s]);
                    break;
                }
                t[j][r] = pairs ? (t1 - t0) * 1e9 / (double)pairs : 0;
            }
        }
        for (size_t k = 0; k < n && !rc; k++) {
            bench_stats_t st = bench_stats(t[k], o.runs);
            if (o.csv)
                printf("%s,%zu,%llu,%.3f,%.3f,%.3f\n", all[idx[k]].name, sizes[s], (unsigned long long)pairs,
                       st.median, st.min, st.max);
            else
                printf("%-9s size %-6zu pairs %-10llu  %.2f ns/pair (%.2f-%.2f)\n", all[idx[k]].name, sizes[s],
                       (unsigned long long)pairs, st.median, st.min, st.max);
        }
    }
    fflush(stdout);
    bench_daemon_stop(&daemon);
    return rc ? 1 : 0;
}
