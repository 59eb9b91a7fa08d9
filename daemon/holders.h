/* holders.h — owner tags, and what departed clients leave allocated
 * (holders.c; docs/DESIGN.md, "Departed holders"). */
#ifndef TCM_HOLDERS_H
#define TCM_HOLDERS_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* Before anything else touches tags: the table's place in the state
 * segment; fresh: a new heap (an adopted one is rebuilt by
 * tcm__holders_recover). */
void tcm__holders_init(tcm_server_t *srv, bool fresh);
/* A free tag for the client in record rec_index (main thread, attach):
 * 0 or -EMFILE (cannot happen: tags outnumber everything that holds one). */
int tcm__tag_take(tcm_server_t *srv, uint32_t rec_index, uint16_t *tag);
/* The tag of a client that never got its Welcome: nobody's again. */
void tcm__tag_give_back(tcm_server_t *srv, uint16_t tag);
/* The live client whose tag this is, or NULL (heap thread). */
tcm_client_t *tcm__tag_client_ht(tcm_server_t *srv, uint16_t tag);

/* Client c has gone (reclaimed: its caches are back) and still holds held
 * bytes: its tag becomes a departed holder's, or nobody's if held is 0. A
 * full table first merges an older holder into its executable's group.
 * Heap thread; before the record is REAPED. Idempotent (a reclaim redone
 * after a crash finds its entry). */
void tcm__holder_depart_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t held);
/* Bytes of departed tag came back: its holder's (or group's) count falls,
 * and a holder that holds nothing more is gone, its tag free. */
void tcm__holder_credit_ht(tcm_server_t *srv, uint16_t tag, uint64_t bytes);
/* One bounded step of the merge sweep (owner words rewritten from merged
 * tags to their groups' tags); true if it did something. */
bool tcm__holders_step_ht(tcm_server_t *srv);
bool tcm__holders_pending(const tcm_server_t *srv);

/* Recovery, after the census (held[tag] bytes) and with the clients
 * taken back: finishes interrupted merges, rebuilds who each tag is and
 * each departed tag's bytes (tag_orphaned), gives tags owned by nobody
 * known to the first group; zeroes held[] of every departed tag. Returns
 * the bytes departed tags hold. */
uint64_t tcm__holders_recover(tcm_server_t *srv, uint64_t *held);
/* Validator: held[] from the census, live clients' entries zeroed. */
bool tcm__holders_validate(tcm_server_t *srv, uint64_t *held, char *why, size_t whylen);

/* A row of the departed view (main thread). */
typedef struct tcm_holder_row {
    tcm_holder_t e;
    uint64_t bytes;
} tcm_holder_row_t;
/* Every entry with bytes, largest first, into rows (room for
 * TCM_HOLDERS + TCM_HOLDER_GROUPS); returns how many. */
size_t tcm__holders_rows(tcm_server_t *srv, tcm_holder_row_t *rows);
#define TCM_HOLDER_WARN_SLACK_S 2 /* beyond decay_ms: a scavenge step and the last RETURNs in flight */
/* Main thread, every second: a departed holder still holding bytes
 * warn_after_s after it left is logged once (rate-limited per executable). */
void tcm__holders_warn(tcm_server_t *srv, uint64_t warn_after_s);

#endif
