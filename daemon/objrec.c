/* objrec.c — the object records: one per small span in its class's
 * arena of the state segment (the span's object bits and owner words), and
 * the tag blocks of words more than one client holds. Records are taken and
 * put back as spans are cut and freed (central.c), their arena pages backed
 * on first use and punched by the trim that runs with the page heap's
 * release (pageheap.c); a recovery claims them again from the span records.
 * The records' contents are central.c's; this file owns where they are.
 * Heap thread only (and the recovery pass, before it starts). */
#include <string.h>

#include "heap.h"
#include "log.h"
#include "objrec.h"
#include "prim.h"
#include "tcm_assert.h"

#define ARENA_PAGE 4096u

/* Back the arena pages of a record of ss. Spans are cut and freed over and
 * over: the pages already backed cost one look at a bitmap. */
static int record_commit(tcm_heap_t *h, tcm_rec_set_t *ss, uint32_t rec)
{
    uint64_t lo = (uint64_t)rec * ss->rec_bytes, hi = lo + ss->rec_bytes;
    uint64_t plo = lo / ARENA_PAGE, phi = (hi - 1) / ARENA_PAGE, p = plo;
    while (p <= phi && tcm__rec_bit(ss, ss->backed, p))
        p++;
    if (p > phi)
        return 0;
    if (h->state_fd >= 0) {
        int err = tcm__commit(h->state_fd, ss->off + p * ARENA_PAGE, (phi + 1 - p) * ARENA_PAGE);
        if (err) {
            tcm__log(TCM_LOG_WARN, "fallocate(state, object records at %llu, %llu bytes) failed: %s",
                     (unsigned long long)(ss->off + p * ARENA_PAGE), (unsigned long long)((phi + 1 - p) * ARENA_PAGE),
                     strerror(-err));
            return err;
        }
    }
    for (; p <= phi; p++)
        *tcm__rec_word(ss, ss->backed, p / 64) |= 1ull << (p % 64);
    return 0;
}

uint32_t tcm__recs_take_ht(tcm_heap_t *h, tcm_rec_set_t *ss, uint32_t k, uint32_t *out)
{
    uint32_t words = (ss->max + 63) / 64, w = ss->lowest / 64, got = 0;
    for (; got < k && w < words; w++) {
        uint64_t *word = tcm__rec_word(ss, ss->used, w);
        for (uint64_t avail = ~*word; avail && got < k; avail &= avail - 1) {
            uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(avail);
            /* an arena has a record for everything the heap can hold */
            if (i >= ss->max || record_commit(h, ss, i) != 0)
                return got;
            *word |= 1ull << (i % 64);
            ss->lowest = i + 1;
            ss->nused++;
            out[got++] = i;
        }
    }
    return got;
}

int tcm__rec_take_ht(tcm_heap_t *h, tcm_rec_set_t *ss, uint32_t *rec)
{
    return tcm__recs_take_ht(h, ss, 1, rec) ? TCM_ST_OK : TCM_ST_NOMEM;
}

void tcm__rec_put_ht(tcm_rec_set_t *ss, uint32_t rec)
{
    TCM_ASSERT(rec < ss->max && tcm__rec_bit(ss, ss->used, rec));
    *tcm__rec_word(ss, ss->used, rec / 64) &= ~(1ull << (rec % 64));
    ss->nused--;
    if (rec < ss->lowest)
        ss->lowest = rec;
    if (ss->trim_lo >= ss->trim_hi)
        ss->trim_lo = ss->trim_hi = rec;
    if (rec < ss->trim_lo)
        ss->trim_lo = rec;
    if (rec + 1 > ss->trim_hi)
        ss->trim_hi = rec + 1;
}

static tcm_rec_set_t *record_set(tcm_heap_t *h, unsigned i) /* 1..TCM_NCLASSES: the classes, then the tag blocks */
{
    return i < TCM_NCLASSES ? &h->recs[i] : &h->tag_blocks;
}

void tcm__recs_reset_ht(tcm_heap_t *h)
{
    for (unsigned c = 1; c <= TCM_NCLASSES; c++) {
        tcm_rec_set_t *ss = record_set(h, c);
        uint64_t pages = (uint64_t)ss->max * ss->rec_bytes / ARENA_PAGE + 1;
        for (uint64_t w = 0; w < (ss->max + 63) / 64; w++)
            *tcm__rec_word(ss, ss->used, w) = 0;
        for (uint64_t w = 0; w < (pages + 63) / 64; w++)
            *tcm__rec_word(ss, ss->backed, w) = 0;
        ss->lowest = ss->nused = 0;
        /* what the previous tcmd backed is unknown: the next trim looks at
         * the whole arena */
        ss->trim_lo = 0;
        ss->trim_hi = ss->max;
    }
}

bool tcm__rec_claim_ht(tcm_rec_set_t *ss, uint32_t rec)
{
    if (rec >= ss->max || tcm__rec_bit(ss, ss->used, rec))
        return false;
    *tcm__rec_word(ss, ss->used, rec / 64) |= 1ull << (rec % 64);
    ss->nused++;
    return true;
}

uint64_t tcm__span_claim_blocks_ht(tcm_heap_t *h, tcm_span_t *sp)
{
    uint32_t *owners = tcm__span_owners(h, sp), words = (h->classes[sp->cls].span_objs + 63) / 64;
    uint64_t repairs = 0;
    for (uint32_t w = 0; w < words; w++) {
        if (!(owners[w] & TCM_OWNER_BLOCK) || tcm__rec_claim_ht(&h->tag_blocks, owners[w] & ~TCM_OWNER_BLOCK))
            continue;
        tcm__log(TCM_LOG_ERROR, "recovery: span at page %u (class %u) names tag block %u, out of range or another's; "
                 "its objects %u..%u are now owned by nobody", sp->first, sp->cls, owners[w] & ~TCM_OWNER_BLOCK,
                 w * 64, w * 64 + 63);
        owners[w] = 0;
        repairs++;
    }
    return repairs;
}

/* Whether any used record of ss overlaps arena page p. */
static bool page_in_use(const tcm_rec_set_t *ss, uint64_t p)
{
    uint64_t sb = ss->rec_bytes;
    uint64_t first = p * ARENA_PAGE / sb, last = ((p + 1) * ARENA_PAGE - 1) / sb;
    if (last >= ss->max)
        last = ss->max - 1;
    for (uint64_t i = first; i <= last; i++) {
        if (i % 64 == 0 && i + 63 <= last) { /* a whole word at once */
            if (*tcm__rec_word(ss, ss->used, i / 64))
                return true;
            i += 63;
        } else if (tcm__rec_bit(ss, ss->used, i)) {
            return true;
        }
    }
    return false;
}

static uint64_t punch(tcm_heap_t *h, tcm_rec_set_t *ss, uint64_t plo, uint64_t phi)
{
    uint64_t backed = 0;
    for (uint64_t p = plo; p < phi; p++) {
        backed += tcm__rec_bit(ss, ss->backed, p);
        *tcm__rec_word(ss, ss->backed, p / 64) &= ~(1ull << (p % 64));
    }
    if (h->state_fd >= 0) {
        int err = tcm__release(h->state_fd, ss->off + plo * ARENA_PAGE, (phi - plo) * ARENA_PAGE);
        if (err) {
            tcm__log(TCM_LOG_WARN, "fallocate(PUNCH_HOLE, state, object records at %llu, %llu bytes) failed: %s",
                     (unsigned long long)(ss->off + plo * ARENA_PAGE), (unsigned long long)((phi - plo) * ARENA_PAGE),
                     strerror(-err));
            return 0;
        }
    }
    return backed * ARENA_PAGE;
}

uint64_t tcm__recs_trim_ht(tcm_heap_t *h)
{
    uint64_t bytes = 0;
    for (unsigned c = 1; c <= TCM_NCLASSES; c++) {
        tcm_rec_set_t *ss = record_set(h, c);
        if (ss->trim_lo >= ss->trim_hi || ss->max == 0)
            continue;
        uint64_t sb = ss->rec_bytes;
        uint64_t plo = ss->trim_lo * sb / ARENA_PAGE, phi = (ss->trim_hi * sb - 1) / ARENA_PAGE + 1;
        ss->trim_lo = ss->trim_hi = 0;
        /* runs of pages no used record lies in, one punch each */
        for (uint64_t p = plo; p < phi;) {
            if (page_in_use(ss, p)) {
                p++;
                continue;
            }
            uint64_t q = p + 1;
            while (q < phi && !page_in_use(ss, q))
                q++;
            bytes += punch(h, ss, p, q);
            p = q;
        }
    }
    return bytes;
}
