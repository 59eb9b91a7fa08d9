/* shares.c — counts per uid (shares.h). */
#include "shares.h"

#include <errno.h>
#include <stdlib.h>

#include "prim.h"

int tcm__shares_init(tcm_shares_t *t, uint32_t cap)
{
    t->mask = cap - 1;
    t->uid = calloc(cap, sizeof *t->uid);
    t->count = calloc(cap, sizeof *t->count);
    if (!t->uid || !t->count) {
        tcm__shares_free(t);
        return -ENOMEM;
    }
    return 0;
}

void tcm__shares_free(tcm_shares_t *t)
{
    free(t->uid);
    free(t->count);
    t->uid = t->count = NULL;
}

/* uid's entry, or the empty one where it would go */
static uint32_t find(const tcm_shares_t *t, uint32_t uid)
{
    uint32_t i = tcm__uid_hash(uid, t->mask);
    while (t->count[i] && t->uid[i] != uid)
        i = (i + 1) & t->mask;
    return i;
}

uint32_t tcm__shares_of(const tcm_shares_t *t, uint32_t uid)
{
    return t->count ? t->count[find(t, uid)] : 0;
}

void tcm__shares_add(tcm_shares_t *t, uint32_t uid)
{
    if (!t->count)
        return;
    uint32_t i = find(t, uid);
    t->uid[i] = uid;
    t->count[i]++;
}

/* The last one gone: the entries after it in its run move back over the
 * hole, so that a search never stops short of them. */
void tcm__shares_drop(tcm_shares_t *t, uint32_t uid)
{
    if (!t->count)
        return;
    uint32_t i = find(t, uid);
    if (!t->count[i] || --t->count[i])
        return;
    for (uint32_t j = (i + 1) & t->mask; t->count[j]; j = (j + 1) & t->mask) {
        uint32_t h = tcm__uid_hash(t->uid[j], t->mask);
        /* j's entry may move to the hole at i unless its home lies in (i, j] */
        if (i <= j ? (h <= i || h > j) : (h <= i && h > j)) {
            t->uid[i] = t->uid[j];
            t->count[i] = t->count[j];
            t->count[j] = 0;
            i = j;
        }
    }
}

bool tcm__is_operator(uint32_t uid)
{
    return uid == 0 || uid == (uint32_t)tcm__uid();
}
