/* reclaim.h — the caches of a client that went away, and the walk of a
 * client's channel that reclaim, the validator and the stats share
 * (reclaim.c). */
#ifndef TCM_RECLAIM_H
#define TCM_RECLAIM_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* The caches of a client that went away. */
void tcm__reclaim_ht(tcm_server_t *srv, tcm_client_t *c);

/* One cache a client's channel lists: reclaim, the validator and the stats
 * all walk a channel with tcm__each_cache. The channel is client memory,
 * read here without touching tcmd's mapping of it (tcm__read_at): a client
 * that claims a thousand threads or full bins costs tcmd reads of holes,
 * which allocate nothing and never fault. Counts are clamped to their
 * arrays' capacity; entries are unchecked. tc, objs and runs point to
 * private copies, valid during the visit; count_off and objs_off say where
 * the client keeps them (the validator reads a suspect entry again). */
typedef struct tcm_cache_view {
    enum { TCM_CACHE_THREAD, TCM_CACHE_BIN, TCM_CACHE_XFER, TCM_CACHE_RUNS } kind;
    uint32_t thread;               /* THREAD and BIN: the thread cache's index */
    const tcm_tcache_t *tc;        /* THREAD and BIN: the thread's cache header and bins */
    unsigned cls;                  /* BIN and XFER */
    void *const *objs;             /* BIN and XFER: n objects */
    const tcm_large_entry_t *runs; /* RUNS: n page runs */
    uint64_t count_off, objs_off;  /* channel offsets of n and of the array */
    uint32_t n;
} tcm_cache_view_t;

/* Calls visit for each thread (THREAD), then its non-empty bins, then the
 * non-empty arrays of the transfer tier, then the page-run cache; stops and
 * returns false when visit does (or it cannot allocate its buffers).
 * Without objects, the arrays' objects are not read (objs is NULL): what
 * counts only the sizes reads a tenth as much. */
bool tcm__each_cache(const tcm_server_t *srv, const tcm_client_t *c,
                     bool (*visit)(void *arg, const tcm_cache_view_t *v), void *arg, bool objects);
/* Read client memory of the channel at off, without faulting (holes and a
 * shrunk channel read as zeros). */
void tcm__chan_read(const tcm_client_t *c, uint64_t off, void *buf, uint64_t len);
uint32_t tcm__chan_u32(const tcm_client_t *c, uint64_t off);

#endif
