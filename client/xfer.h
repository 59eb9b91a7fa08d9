/* xfer.h — the process's transfer tier (xfer.c). */
#ifndef TCM_CLIENT_XFER_H
#define TCM_CLIENT_XFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

TCM_HIDDEN uint32_t tcm__xfer_put(unsigned cls, tcm_bin_t *b, uint32_t n); /* from b's top; how many went */
/* Objects of a class that xfer_budget leaves room for now (no lock: a hint
 * outside it). */
TCM_HIDDEN uint64_t tcm__xfer_budget_room(unsigned cls);
/* The answered REFILL's offs[from, from + n) into the tier: the slot is
 * IDLE if all went in, else the rest are at the front of its offs (the
 * caller gives them back); returns how many are left. */
TCM_HIDDEN uint32_t tcm__xfer_put_fetched(unsigned cls, tcm_slot_t *slot, uint32_t from, uint32_t n);
TCM_HIDDEN uint32_t tcm__xfer_take(unsigned cls, void **dst, uint32_t want);
TCM_HIDDEN bool tcm__xfer_empty(unsigned cls);
/* Back to tcmd, the page-run cache first, then the largest classes: all of
 * it, or what exceeds run_cache and xfer_budget. */
TCM_HIDDEN void tcm__xfer_trim(bool all);
TCM_HIDDEN void *tcm__xfer_alloc(unsigned cls);        /* threads without a cache */
TCM_HIDDEN void tcm__xfer_free(unsigned cls, void *p);

#endif
