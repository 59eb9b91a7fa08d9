/* requests.h — serving the ring requests of a client (requests.c). Heap
 * thread. */
#ifndef TCM_REQUESTS_H
#define TCM_REQUESTS_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* One ring request, served or redone. A turn serves at most
 * TCM_PER_CLIENT_BURST requests of one ring before the next ring. */
#define TCM_PER_CLIENT_BURST 64u
bool tcm__serve_client_ht(tcm_server_t *srv, tcm_client_t *c, bool frees_only);
void tcm__resolve_intent_ht(tcm_server_t *srv, uint64_t *redone, uint64_t *rolled_back);
void tcm__credit_ht(tcm_server_t *srv, uint16_t tag, uint64_t bytes);
/* Free objects a dead client cached (quietly: refusals are expected);
 * returns how many were freed. */
uint32_t tcm__free_objects_ht(tcm_server_t *srv, tcm_client_t *c, unsigned cls, const uint64_t *offs, uint32_t n);

#endif
