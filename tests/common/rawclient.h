/* rawclient.h — a hand-made client for tests: it attaches with a Hello,
 * maps what the Welcome names and speaks the ring protocol directly, so a
 * test can post what libtcm never would (bad ops, classes, slots) or stop
 * between two steps libtcm takes together. */
#ifndef TCM_RAWCLIENT_H
#define TCM_RAWCLIENT_H

#include <stdint.h>

#include "tcm_layout.h"

typedef struct tt_raw {
    int sock;
    uint8_t *chan;
    tcm_chan_layout_t lay;
    tcm_ring_t *ring;
    tcm_slot_t *slots;
    tcm_bell_t *bell;
    const tcm_meta_hdr_t *meta;
} tt_raw_t;

/* Attach to the tcmd on socket (CHECKs every step). */
void tt_raw_attach(tt_raw_t *r, const char *socket);
/* Post slot idx (filled by the caller), wait up to 5 s for the answer,
 * take it (slot IDLE again); returns its status. */
int tt_raw_call(tt_raw_t *r, uint32_t idx);
/* Push idx on the ring and ring the bell; nothing else. */
void tt_raw_post_only(tt_raw_t *r, uint32_t idx);

#endif
