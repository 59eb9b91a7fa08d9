/* objrec.h — the object records and tag blocks, where they live in the
 * class arenas (objrec.c). Heap thread. */
#ifndef TCM_OBJREC_H
#define TCM_OBJREC_H

#include <stdbool.h>
#include <stdint.h>

#include "heap.h"

/* One object record per small span in its class's arena, one tag block per word of
 * objects that more than one client holds. */

/* The lowest free record of ss, its arena pages backed first (a full
 * /dev/shm is NOMEM, never a SIGBUS); marked in use. */
int tcm__rec_take_ht(tcm_heap_t *h, tcm_rec_set_t *ss, uint32_t *record);
/* The k lowest free records of ss into out[], each backed and marked in use
 * as it is taken; returns how many (fewer: no room or no backing for the
 * rest). A REFILL's new spans take theirs in one scan. */
uint32_t tcm__recs_take_ht(tcm_heap_t *h, tcm_rec_set_t *ss, uint32_t k, uint32_t *out);
/* A record that nothing names any more; its pages go at the next trim. */
void tcm__rec_put_ht(tcm_rec_set_t *ss, uint32_t record);
/* Recovery: forget every record (and what is backed), so the spans claim
 * theirs again and the next trim looks at every arena page. */
void tcm__recs_reset_ht(tcm_heap_t *h);
/* Recovery: a record named by an allocated span (or one of its owner words);
 * false if out of range or already claimed. */
bool tcm__rec_claim_ht(tcm_rec_set_t *ss, uint32_t record);
/* Recovery: claim the tag blocks the owner words of small span s name; a
 * word naming a block out of range or another's is repaired (its objects'
 * owner becomes tag 0, nobody's). Returns the repairs. */
uint64_t tcm__span_claim_blocks_ht(tcm_heap_t *h, tcm_span_t *sp);
/* Punch the arena pages no used record lies in (among those freed since the
 * last trim); returns the bytes punched. Runs with the page heap's release
 * (tcmctl release, decay, the page cache cap), never per span. */
uint64_t tcm__recs_trim_ht(tcm_heap_t *h);

#endif
