/* shares.h — what each user holds of something tcmd has a fixed amount of
 * (control connections, client records, roots): a count per uid, kept as
 * the things come and go, so that a share is checked in O(1) whatever the
 * number of users. One thread per table. */
#ifndef TCM_SHARES_H
#define TCM_SHARES_H

#include <stdbool.h>
#include <stdint.h>

/* Open addressing; an entry leaves when its count reaches 0, so the table
 * holds only users that hold something: cap is at least twice the most
 * things there can be at once. Its pages appear as entries are used: a
 * table sized for every peer tcmd may have costs a page or two where one
 * user holds everything (the drop-in's private heap). */
typedef struct tcm_share {
    uint32_t uid;
    uint32_t count; /* 0: the entry is empty */
} tcm_share_t;

typedef struct tcm_shares {
    uint32_t mask; /* cap - 1 */
    tcm_share_t *e;
} tcm_shares_t;

/* Where a uid's entry starts in a table of mask + 1 (a power of two). */
static inline uint32_t tcm__uid_hash(uint32_t uid, uint32_t mask)
{
    return (uid * 0x9e3779b1u) & mask;
}

int tcm__shares_init(tcm_shares_t *t, uint32_t cap); /* cap a power of two; 0 or -ENOMEM */
static inline uint32_t tcm__pow2_at_least(uint64_t n)
{
    uint32_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}
void tcm__shares_free(tcm_shares_t *t);
uint32_t tcm__shares_of(const tcm_shares_t *t, uint32_t uid);
void tcm__shares_add(tcm_shares_t *t, uint32_t uid);
void tcm__shares_drop(tcm_shares_t *t, uint32_t uid);

/* Root, and the user tcmd runs as: the operator (DESIGN, "Threat model"). */
bool tcm__is_operator(uint32_t uid);

#endif
