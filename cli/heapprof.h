/* heapprof.h — what tcmctl heap-profile makes of tcmd's samples (heapprof.c):
 * a pprof profile, or the top allocation sites. */
#ifndef TCM_HEAPPROF_H
#define TCM_HEAPPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tcm.pb-c.h"

/* The samples and process records tcmd sent (pages put together). */
typedef struct tcm_hp {
    Tcm__ProfileProc **procs;
    size_t nprocs;
    Tcm__ProfileSample **samples;
    size_t nsamples;
    uint64_t interval; /* profile_sample now */
} tcm_hp_t;

/* An allocation site: the function that called malloc, with what its
 * samples stand for (scaled back by the sampling rate). */
typedef struct tcm_hp_site {
    char func[256];    /* "" when no symbol covers it: then where, as object+0xoffset */
    char file[256];    /* "" without DWARF line information */
    int line;
    double bytes, objects;
    uint32_t procs;    /* processes whose samples it has */
    uint32_t pids[4];  /* the first of them */
} tcm_hp_site_t;

/* The sites, most bytes first; *sites is malloc'd (the caller frees it).
 * The count, or -1 (out of memory). */
long tcm__hp_top(const tcm_hp_t *hp, tcm_hp_site_t **sites);

/* The profile, gzipped, to out. 0, or -1 with a message in err. */
int tcm__hp_pprof(const tcm_hp_t *hp, FILE *out, char *err, size_t errlen);

#endif
