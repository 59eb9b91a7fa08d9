/* tcm-bench-daemon-ops — a client that keeps tcmd's heap thread busy with
 * known requests, for counting what each costs the heap thread (run tcmd
 * under callgrind; bench/run_daemon_cost.sh does).
 *   --pages N   N page-run pairs (ALLOC_PAGES + FREE_PAGES)
 *   --batches N N rounds of COUNT objects of SIZE bytes allocated and freed
 *               (REFILL and RETURN batches through the thread cache)
 *   --size S    object size (default 16384)
 *   --count C   objects per round (default 4096)
 *   --phase-cmd CMD  run "CMD refill ROUND" after each round's mallocs and
 *               "CMD return ROUND" after its frees (through the shell), so
 *               that a measurement can cut tcmd's counts per phase
 * Attaches to $TCM_SOCKET. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tcm.h"

static int phase(const char *cmd, const char *what, long round)
{
    if (!cmd)
        return 0;
    char line[4096];
    if ((size_t)snprintf(line, sizeof line, "%s %s %ld", cmd, what, round) >= sizeof line)
        return -1;
    return system(line);
}

int main(int argc, char **argv)
{
    long pages = 20000, batches = 20, size = 16384, count = 4096;
    const char *phase_cmd = NULL;
    static const struct option opts[] = {{"pages", required_argument, 0, 'p'}, {"batches", required_argument, 0, 'b'},
                                         {"size", required_argument, 0, 's'},  {"count", required_argument, 0, 'c'},
                                         {"phase-cmd", required_argument, 0, 'P'}, {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt == 'p')
            pages = atol(optarg);
        else if (opt == 'b')
            batches = atol(optarg);
        else if (opt == 's')
            size = atol(optarg);
        else if (opt == 'c')
            count = atol(optarg);
        else if (opt == 'P')
            phase_cmd = optarg;
        else
            return 2;
    }
    if (tcm_init(NULL) != 0)
        return 1;
    for (long i = 0; i < pages; i++) {
        void *p = tcm_malloc(512 * 1024);
        if (!p)
            return 1;
        tcm_free(p);
    }
    void **objs = malloc((size_t)(count > 0 ? count : 1) * sizeof *objs);
    if (!objs || size < 1)
        return 2;
    for (long b = 0; b < batches; b++) {
        for (long i = 0; i < count; i++)
            if (!(objs[i] = tcm_malloc((size_t)size)))
                return 1;
        if (phase(phase_cmd, "refill", b) != 0)
            return 1;
        for (long i = 0; i < count; i++)
            tcm_free(objs[i]);
        if (phase(phase_cmd, "return", b) != 0)
            return 1;
    }
    free(objs);
    tcm_shutdown();
    return 0;
}
