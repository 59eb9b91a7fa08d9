/* roots.h — the named roots on the heap thread: ROOT_SET in its three
 * modes, and each user's share of the table. */
#ifndef TCM_ROOTS_H
#define TCM_ROOTS_H

#include "heap.h"
#include "server.h"

/* A ROOT_SET from client c: name in slot->offs, off (UINT64_MAX: delete),
 * mode (enum tcm_root_mode), expected (REPLACE; UINT64_MAX: absent).
 * Returns a ring status. */
int tcm__root_set_ht(tcm_server_t *srv, tcm_client_t *c, const tcm_slot_t *slot, uint64_t off, uint32_t mode,
                     uint64_t expected);

#endif
