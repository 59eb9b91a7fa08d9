/* tcm-bench-grow — memory nobody used before against memory reused: ROUNDS
 * rounds of allocating COUNT objects of SIZE bytes, writing every byte, and
 * freeing them all. The first round of each allocator pays for first-touch
 * pages (tcm: the commit in tcmd's refill; the others: page faults); the
 * later ones reuse what the first freed. A growing cache (tcm-kv with 16 KiB
 * values, bench/run_kv.sh) lives in the first round.
 *   --size 16448 --count 50000 --rounds 4 --alloc all
 * With --calloc STRIDE: objects from calloc, a byte in every STRIDE written
 * (a table used sparsely: what a calloc that clears fresh pages costs).
 *   --size 16M --count 16 --rounds 4 --calloc 256K --alloc all
 * Output: a line per allocator, objects per second in the first round and
 * the median of the others. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static double round_once(const bench_alloc_t *a, void **v, size_t count, size_t size, size_t stride)
{
    double t0 = bench_now();
    for (size_t i = 0; i < count; i++) {
        if (!(v[i] = stride ? a->zalloc(1, size) : a->alloc(size)))
            return -1;
        if (!stride)
            memset(v[i], (int)i, size);
        for (size_t o = 0; stride && o < size; o += stride)
            ((volatile char *)v[i])[o] += 1;
    }
    double t = bench_now() - t0;
    for (size_t i = 0; i < count; i++)
        a->release(v[i]);
    return t;
}

int main(int argc, char **argv)
{
    size_t size = 16448, count = 50000, stride = 0;
    int rounds = 4;
    const char *alloc_list = "all", *tcmd = NULL;
    static const struct option opts[] = {{"size", required_argument, 0, 's'},  {"count", required_argument, 0, 'c'},
                                         {"rounds", required_argument, 0, 'r'}, {"alloc", required_argument, 0, 'a'},
                                         {"tcmd", required_argument, 0, 'd'}, {"calloc", required_argument, 0, 'z'},
                                         {"page-cache-cap", required_argument, 0, 'p'}, {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 's': size = bench_parse_size("--size", optarg); break;
        case 'c': count = bench_parse_size("--count", optarg); break;
        case 'r': rounds = atoi(optarg); break;
        case 'a': alloc_list = optarg; break;
        case 'd': tcmd = optarg; break;
        case 'z': stride = bench_parse_size("--calloc", optarg); break;
        case 'p': /* tcmd keeps this much freed memory instead of giving it back at once */
            bench_daemon_add_arg("--page-cache-cap");
            bench_daemon_add_arg(optarg);
            break;
        default:
            fprintf(stderr, "usage: tcm-bench-grow [--size S] [--count N] [--rounds R] [--alloc tcm,NAME|all] "
                            "[--page-cache-cap SIZE] [--calloc STRIDE]\n");
            return 2;
        }
    }
    if (rounds < 2 || rounds > BENCH_MAX_RUNS || !count || !size)
        return 2;
    size_t nall, idx[8];
    const bench_alloc_t *all = bench_allocs(&nall);
    bench_daemon_t daemon = {0};
    size_t n = bench_setup(alloc_list, idx, 8, &daemon, tcmd);
    void **v = malloc(count * sizeof *v);
    for (size_t k = 0; k < n; k++) {
        double t[BENCH_MAX_RUNS];
        for (int r = 0; r < rounds; r++)
            if ((t[r] = round_once(&all[idx[k]], v, count, size, stride)) < 0) {
                fprintf(stderr, "grow: %s: allocation failed\n", all[idx[k]].name);
                bench_daemon_stop(&daemon);
                return 1;
            }
        bench_stats_t later = bench_stats(t + 1, rounds - 1);
        printf("%-9s %zu x %zu B: first round %.4g k objects/s (%.2f ms), then %.4g k/s (%.2f ms, median of %d)\n",
               all[idx[k]].name, count, size, count / t[0] / 1e3, t[0] * 1e3, count / later.median / 1e3,
               later.median * 1e3, rounds - 1);
    }
    free(v);
    bench_daemon_stop(&daemon);
    return 0;
}
