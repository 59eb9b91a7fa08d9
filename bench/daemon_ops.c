/* tcm-bench-daemon-ops — a client that keeps tcmd's heap thread busy with
 * known requests, for counting what each costs the heap thread (run tcmd
 * under callgrind; bench/run_daemon_cost.sh does).
 *   --pages N   N page-run pairs (ALLOC_PAGES + FREE_PAGES)
 *   --batches N N rounds of 4096 objects of 16 KiB allocated and freed
 *               (REFILL and RETURN batches through the thread cache)
 * Attaches to $TCM_SOCKET; prints the requests it made tcmd serve. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "tcm.h"

int main(int argc, char **argv)
{
    long pages = 20000, batches = 20;
    static const struct option opts[] = {{"pages", required_argument, 0, 'p'}, {"batches", required_argument, 0, 'b'},
                                         {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (opt == 'p')
            pages = atol(optarg);
        else if (opt == 'b')
            batches = atol(optarg);
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
    static void *objs[4096];
    for (long b = 0; b < batches; b++) {
        for (int i = 0; i < 4096; i++)
            if (!(objs[i] = tcm_malloc(16384)))
                return 1;
        for (int i = 0; i < 4096; i++)
            tcm_free(objs[i]);
    }
    tcm_shutdown();
    return 0;
}
