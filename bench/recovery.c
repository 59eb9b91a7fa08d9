/* tcm-bench-recovery — how long a tcmd restart takes: for each heap
 * reservation and number of live objects, the harness (a client) allocates
 * the objects, tcmd is killed with SIGKILL and started again on the same
 * name, and two figures are taken: the restart (exec of the new tcmd until
 * its socket accepts, the gap clients see) and the recovery pass itself
 * (tcmd's last_recovery_us). Then a page-run allocation shows the client
 * resumed, the objects are freed, tcmd stops.
 *   --heaps 1G,8G,64G   --live 0,100000,1000000,3000000   --runs 3
 * CSV on stdout: heap_bytes,live_objects,run,restart_ms,recovery_us */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "tcm.h"

static size_t split(const char *list, uint64_t *out, size_t max, const char *opt)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    size_t n = 0;
    for (char *tok = strtok(buf, ","); tok && n < max; tok = strtok(NULL, ","))
        out[n++] = bench_parse_size(opt, tok);
    return n;
}

int main(int argc, char **argv)
{
    const char *heaps_arg = "1G,8G,64G", *live_arg = "0,100000,1000000,3000000", *tcmd = NULL;
    int runs = 3;
    static const struct option opts[] = {{"heaps", required_argument, 0, 'h'}, {"live", required_argument, 0, 'l'},
                                         {"runs", required_argument, 0, 'r'}, {"tcmd", required_argument, 0, 't'},
                                         {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'h': heaps_arg = optarg; break;
        case 'l': live_arg = optarg; break;
        case 'r': runs = atoi(optarg); break;
        case 't': tcmd = optarg; break;
        default:
            fprintf(stderr, "usage: tcm-bench-recovery [--heaps LIST] [--live LIST] [--runs N] [--tcmd PATH]\n");
            return 2;
        }
    }
    uint64_t heaps[8], live[8];
    size_t nh = split(heaps_arg, heaps, 8, "--heaps"), nl = split(live_arg, live, 8, "--live");
    printf("heap_bytes,live_objects,run,restart_ms,recovery_us\n");
    for (size_t hi = 0; hi < nh; hi++) {
        char heap[32];
        snprintf(heap, sizeof heap, "%llu", (unsigned long long)heaps[hi]);
        for (size_t li = 0; li < nl; li++) {
            bench_daemon_clear_args();
            bench_daemon_add_arg("--heap-size");
            bench_daemon_add_arg(heap);
            bench_daemon_add_arg("--log"); /* one line per recovery: not on the terminal */
            bench_daemon_add_arg("/dev/null");
            bench_daemon_t d;
            bench_daemon_start(&d, tcmd);
            void **objs = malloc((live[li] ? live[li] : 1) * sizeof *objs);
            for (uint64_t i = 0; i < live[li]; i++) /* 16 to 256 B: many spans of many classes */
                if (!(objs[i] = tcm_malloc(16 + (i * 7919) % 241))) {
                    fprintf(stderr, "recovery: heap full after %llu objects\n", (unsigned long long)i);
                    return 1;
                }
            double restart[BENCH_MAX_RUNS], recov[BENCH_MAX_RUNS];
            for (int r = 0; r < runs && r < BENCH_MAX_RUNS; r++) {
                bench_daemon_kill(&d);
                restart[r] = bench_daemon_restart(&d) * 1e3;
                recov[r] = (double)bench_daemon_query(&d, "stats", "last_recovery_us");
                void *p = tcm_malloc(1 << 20); /* needs tcmd: the harness resumed */
                if (!p) {
                    fprintf(stderr, "recovery: the client did not resume\n");
                    return 1;
                }
                tcm_free(p);
                printf("%s,%llu,%d,%.2f,%.0f\n", heap, (unsigned long long)live[li], r, restart[r], recov[r]);
                fflush(stdout);
            }
            bench_stats_t s1 = bench_stats(restart, runs), s2 = bench_stats(recov, runs);
            fprintf(stderr, "heap %6.0f GiB, %8llu live objects: restart %7.2f ms (%.2f-%.2f), recovery pass %8.0f us\n",
                    (double)heaps[hi] / (1 << 30), (unsigned long long)live[li], s1.median, s1.min, s1.max, s2.median);
            for (uint64_t i = 0; i < live[li]; i++)
                tcm_free(objs[i]);
            free(objs);
            bench_daemon_stop(&d);
        }
    }
    return 0;
}
