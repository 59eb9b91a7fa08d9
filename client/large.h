/* large.h — the process's cache of page runs (large.c). */
#ifndef TCM_CLIENT_LARGE_H
#define TCM_CLIENT_LARGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

TCM_HIDDEN uint64_t tcm__large_take(uint32_t npages); /* offset of a cached run, 0 if none */
TCM_HIDDEN bool tcm__large_keep(uint64_t off, uint32_t npages); /* false: give it to tcmd */
/* A cached run kept for a sample (one page that tcmd marked
 * TCM_SAMPLE_AWAITED: a stock's, or a thread's run asked for ahead of a
 * sample that did not come, cached as the thread left; only this
 * process's own reach its cache), out of the cache. Its offset, 0 if none. */
TCM_HIDDEN uint64_t tcm__large_marked(void);
/* How many such runs the cache holds. */
TCM_HIDDEN uint32_t tcm__large_marked_count(void);
/* How many more runs of npages it would keep (its entries, run_cache). */
TCM_HIDDEN uint32_t tcm__large_room(uint32_t npages);
TCM_HIDDEN void tcm__large_trim(uint64_t keep_bytes); /* cached runs back to tcmd, down to keep_bytes */
TCM_HIDDEN void tcm__free_pages(uint64_t off);
/* What tcmd answered to a FREE_PAGES of off: fatal on a refusal. */
TCM_HIDDEN void tcm__free_pages_answered(uint64_t off, int st);

#endif
