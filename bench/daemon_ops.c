/* tcm-bench-daemon-ops — a client that keeps tcmd's heap thread busy with
 * known requests, for counting what each costs the heap thread (run tcmd
 * under callgrind; bench/run_daemon_cost.sh does).
 *   --pages N   N page-run pairs (ALLOC_PAGES + FREE_PAGES)
 *   --batches N N rounds of COUNT objects of SIZE bytes allocated and freed
 *               (REFILL and RETURN batches through the thread cache)
 *   --size S    object size (default 16384)
 *   --count C   objects per round (default 4096)
 * Attaches to $TCM_SOCKET; prints the requests it made tcmd serve. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "tcm.h"

int main(int argc, char **argv)
{
    long pages = 20000, batches = 20, size = 16384, count = 4096;
    static const struct option opts[] = {{"pages", required_argument, 0, 'p'}, {"batches", required_argument, 0, 'b'},
                                         {"size", required_argument, 0, 's'},  {"count", required_argument, 0, 'c'},
                                         {0, 0, 0, 0}};
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
        for (long i = 0; i < count; i++)
            tcm_free(objs[i]);
    }
    free(objs);
    tcm_shutdown();
    return 0;
}
