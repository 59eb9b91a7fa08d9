/* shares.c — counts per uid (shares.h). */
#include "shares.h"

#include <errno.h>

#include "prim.h"

int tcm__shares_init(tcm_shares_t *t, uint32_t cap)
{
    t->mask = cap - 1;
    t->e = tcm__reserve((uint64_t)cap * sizeof *t->e);
    return t->e ? 0 : -ENOMEM;
}

void tcm__shares_free(tcm_shares_t *t)
{
    if (t->e)
        tcm__unmap(t->e, ((uint64_t)t->mask + 1) * sizeof *t->e);
    t->e = NULL;
}

/* uid's entry, or the empty one where it would go */
static uint32_t find(const tcm_shares_t *t, uint32_t uid)
{
    uint32_t i = tcm__uid_hash(uid, t->mask);
    while (t->e[i].count && t->e[i].uid != uid)
        i = (i + 1) & t->mask;
    return i;
}

uint32_t tcm__shares_of(const tcm_shares_t *t, uint32_t uid)
{
    return t->e ? t->e[find(t, uid)].count : 0;
}

void tcm__shares_add(tcm_shares_t *t, uint32_t uid)
{
    if (!t->e)
        return;
    uint32_t i = find(t, uid);
    t->e[i].uid = uid;
    t->e[i].count++;
}

/* The last one gone: the entries after it in its run move back over the
 * hole, so that a search never stops short of them. */
void tcm__shares_drop(tcm_shares_t *t, uint32_t uid)
{
    if (!t->e)
        return;
    uint32_t i = find(t, uid);
    if (!t->e[i].count || --t->e[i].count)
        return;
    for (uint32_t j = (i + 1) & t->mask; t->e[j].count; j = (j + 1) & t->mask) {
        uint32_t h = tcm__uid_hash(t->e[j].uid, t->mask);
        /* j's entry may move to the hole at i unless its home lies in (i, j] */
        if (i <= j ? (h <= i || h > j) : (h <= i && h > j)) {
            t->e[i] = t->e[j];
            t->e[j].count = 0;
            i = j;
        }
    }
}

bool tcm__is_operator(uint32_t uid)
{
    return uid == 0 || uid == (uint32_t)tcm__uid();
}
