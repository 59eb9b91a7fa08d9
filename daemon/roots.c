/* roots.c — named roots (roots.h). The table is hashed with tombstones
 * (tcm_layout.h): a name's entry is on its probe path before the first
 * entry never used, and a new name takes the first tombstone on that path.
 * A root is its creator's: it counts in that user's share (roots_per_uid)
 * until deleted, and only that user or the operator may change it. */
#include <string.h>

#include "crash.h"
#include "requests.h"
#include "roots.h"
#include "shares.h"

int tcm__root_set_ht(tcm_server_t *srv, tcm_client_t *c, const tcm_slot_t *slot, uint64_t off, uint32_t mode,
                     uint64_t expected)
{
    char name[TCM_ROOT_NAME_MAX];
    memcpy(name, slot->offs, sizeof name);
    size_t len = strnlen(name, sizeof name);
    if (len == 0 || len == sizeof name)
        return TCM_ST_BAD_NAME;
    if (off != UINT64_MAX && (off >= srv->heap_size || off < TCM_PAGE_SIZE))
        return TCM_ST_BAD_OFFSET;
    if (mode > TCM_ROOT_REPLACE)
        return TCM_ST_BAD_OP;
    tcm_heap_t *h = &srv->h;
    uint32_t mask = h->nroots - 1, at = tcm__root_hash(name, mask), uid = c->rec->uid;
    int found = -1, free_at = -1;
    uint64_t cur_off = 0;
    for (uint32_t i = 0; i < h->nroots; i++, at = (at + 1) & mask) {
        char cur[TCM_ROOT_NAME_MAX];
        uint64_t o;
        uint32_t holder = tcm__root_read(&h->roots[at], &o, cur);
        if (tcm__root_live(holder) && strcmp(cur, name) == 0) {
            found = (int)at;
            cur_off = o;
            break;
        }
        if (!tcm__root_live(holder) && free_at < 0)
            free_at = (int)at;
        if (!holder)
            break;
    }
    uint32_t holder = tcm__root_holder(uid);
    if (found >= 0) {
        if (mode == TCM_ROOT_CREATE)
            return TCM_ST_EXISTS;
        if (mode == TCM_ROOT_REPLACE && cur_off != expected)
            return TCM_ST_CHANGED;
        uint32_t was = atomic_load_explicit(&h->roots[found].holder, memory_order_relaxed);
        if (was != holder && !tcm__is_operator(uid))
            return TCM_ST_NOT_HOLDER;
        holder = was; /* it stays in its creator's share, whoever changes it */
    } else {
        if (mode == TCM_ROOT_REPLACE && expected != UINT64_MAX)
            return TCM_ST_CHANGED;
        if (off == UINT64_MAX)
            return TCM_ST_OK;
        if (free_at < 0)
            return TCM_ST_NO_ROOM;
        if (tcm__shares_of(&h->root_shares, holder) >= srv->roots_per_uid)
            return TCM_ST_ROOT_SHARE;
        found = free_at;
    }
    tcm_req_intent_t *ri = &srv->state->req;
    ri->root = (uint32_t)found;
    ri->holder = holder;
    ri->arg = off;
    memcpy(ri->name, name, sizeof name);
    tcm__req_set_phase(ri, TCM_INTENT_APPLYING);
    TCM_CRASH_POINT(root_set);
    /* the seqlock write step by step, for the crash points inside it: a
     * kill there leaves the sequence odd, which the redo completes */
    tcm_root_t *r = &h->roots[found];
    bool was_live = tcm__root_live(atomic_load_explicit(&r->holder, memory_order_relaxed));
    uint32_t seq = tcm__root_write_begin(r);
    TCM_CRASH_POINT(root_odd);
    tcm__root_write_data(r, name, off, holder);
    TCM_CRASH_POINT(root_data);
    tcm__root_write_end(r, seq);
    if (!was_live && off != UINT64_MAX)
        tcm__shares_add(&h->root_shares, holder);
    else if (was_live && off == UINT64_MAX)
        tcm__shares_drop(&h->root_shares, holder);
    return TCM_ST_OK;
}
