/* heapprof_none.c — tcmctl heap-profile where tcmctl is built without
 * libdw and zlib (the Windows build): the command says so. */
#include <stdio.h>

#include "heapprof.h"

long tcm__hp_top(const tcm_hp_t *hp, tcm_hp_site_t **sites)
{
    (void)hp;
    *sites = NULL;
    fprintf(stderr, "tcmctl: heap-profile is not built on this platform (it needs libdw and zlib)\n");
    return -1;
}

int tcm__hp_pprof(const tcm_hp_t *hp, FILE *out, char *err, size_t errlen)
{
    (void)hp, (void)out;
    snprintf(err, errlen, "heap-profile is not built on this platform (it needs libdw and zlib)");
    return -1;
}
