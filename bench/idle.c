/* tcm-bench-idle — memory that comes back by itself: the harness allocates
 * --bytes of small objects (64 B to 1 KiB, many classes) and page runs,
 * frees everything, stays attached and does nothing; every --step seconds
 * for --seconds it prints the heap's committed bytes (tmpfs blocks) as a
 * share of the peak. Settings go to the private tcmd with --set KEY=VALUE.
 * CSV on stdout: t_s,committed_bytes,share_of_peak */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "tcm.h"

int main(int argc, char **argv)
{
    uint64_t bytes = 256ull << 20;
    double seconds = 35, step = 5;
    const char *tcmd = NULL;
    static const char *sets[8];
    int nsets = 0;
    static const struct option opts[] = {{"bytes", required_argument, 0, 'b'}, {"seconds", required_argument, 0, 's'},
                                         {"step", required_argument, 0, 'p'}, {"set", required_argument, 0, 'k'},
                                         {"tcmd", required_argument, 0, 't'}, {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'b': bytes = bench_parse_size("--bytes", optarg); break;
        case 's': seconds = atof(optarg); break;
        case 'p': step = atof(optarg); break;
        case 'k': if (nsets < 8) sets[nsets++] = optarg; break;
        case 't': tcmd = optarg; break;
        default:
            fprintf(stderr, "usage: tcm-bench-idle [--bytes N] [--seconds S] [--step S] [--set KEY=VALUE]...\n");
            return 2;
        }
    }
    bench_daemon_t d;
    bench_daemon_start(&d, tcmd);
    for (int i = 0; i < nsets; i++) {
        char cmd[512], key[128];
        const char *eq = strchr(sets[i], '=');
        if (!eq)
            return 2;
        snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
        snprintf(cmd, sizeof cmd, "config set %s %s", key, eq + 1);
        if (bench_daemon_query(&d, cmd, key) < 0) { /* the answer is {KEY: {...}}; -1 if refused */
            fprintf(stderr, "idle: tcmd refused %s\n", cmd);
            return 1;
        }
    }
    size_t n = 0, cap = 1 << 20;
    void **objs = malloc(cap * sizeof *objs);
    for (uint64_t total = 0; total < bytes && n < cap; n++) {
        size_t size = n % 64 == 0 ? 300000 : 64 + (n * 7919) % 961;
        if (!(objs[n] = tcm_malloc(size)))
            break;
        memset(objs[n], 1, size < 4096 ? size : 4096);
        total += size;
    }
    int64_t peak = bench_daemon_query(&d, "stats", "bytes_committed");
    for (size_t i = 0; i < n; i++)
        tcm_free(objs[i]);
    printf("t_s,committed_bytes,share_of_peak\n");
    double t0 = bench_now();
    for (double t = 0; t <= seconds + 1e-9; t += step) {
        while (bench_now() - t0 < t)
            usleep(10000);
        int64_t c = bench_daemon_query(&d, "stats", "bytes_committed");
        printf("%.0f,%lld,%.4f\n", t, (long long)c, (double)c / (double)peak);
        fflush(stdout);
    }
    fprintf(stderr, "idle: peak %lld bytes committed after allocating %zu objects\n", (long long)peak, n);
    bench_daemon_stop(&d);
    return 0;
}
