/* heap.c — laying out a fresh metadata and state segment, and pointing the
 * heap thread's view (tcm_heap_t) at the parts of either segment. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "heap.h"
#include "log.h"
#include "pageheap.h"
#include "prim.h"

/* The record sets (the classes' object records and the tag blocks) and
 * the page heap's maps of huge ranges: their bitmaps and counts in one
 * private reservation, whose pages appear as they are touched. The
 * classes' maps interleave (tcm_rec_set_t), the tag blocks' follow. */
static uint64_t used_words(const tcm_rec_set_t *ss)
{
    return (ss->max + 63) / 64;
}

static uint64_t backed_words(const tcm_rec_set_t *ss)
{
    return ((uint64_t)ss->max * ss->rec_bytes / 4096 + 1 + 63) / 64;
}

static int reserve_private_maps(tcm_heap_t *h, uint8_t *sb)
{
    const uint32_t nclasses = TCM_NCLASSES - 1;
    uint64_t uwords = 0, bwords = 0;
    for (unsigned c = 1; c < TCM_NCLASSES; c++) {
        h->recs[c] = (tcm_rec_set_t){.off = h->sl.off_arena[c], .rec_bytes = h->sl.rec_bytes[c],
                                       .max = h->sl.max_recs[c], .stride = nclasses};
        uwords = used_words(&h->recs[c]) > uwords ? used_words(&h->recs[c]) : uwords;
        bwords = backed_words(&h->recs[c]) > bwords ? backed_words(&h->recs[c]) : bwords;
    }
    h->tag_blocks = (tcm_rec_set_t){.off = h->sl.off_tag_blocks, .rec_bytes = TCM_TAG_BLOCK,
                                     .max = h->sl.max_tag_blocks, .stride = 1};
    h->tag_block_base = sb + h->sl.off_tag_blocks;
    uint64_t words = (uwords + bwords) * nclasses + used_words(&h->tag_blocks) + backed_words(&h->tag_blocks);
    h->nranges = h->npages / TCM_HUGE_PAGES;
    /* and the page heap's map of huge ranges, its counts per range */
    uint64_t hwords = h->nranges / 64 + 1, cwords = (h->nranges + 3) / 4, swords = (h->nranges + 1) / 2;
    words += hwords + 2 * cwords + swords;
    uint64_t *bits = tcm__reserve(words * sizeof(uint64_t));
    if (!bits)
        return -ENOMEM;
    h->recs_bits = bits;
    h->recs_words = words;
    h->huge = bits;
    h->huge_free = (uint16_t *)(bits + hwords);
    h->huge_low = (uint16_t *)(bits + hwords + cwords);
    h->huge_since = (uint32_t *)(bits + hwords + 2 * cwords);
    bits += hwords + 2 * cwords + swords;
    for (unsigned c = 1; c < TCM_NCLASSES; c++) {
        h->recs[c].used = bits + (c - 1);
        h->recs[c].backed = bits + uwords * nclasses + (c - 1);
    }
    bits += (uwords + bwords) * nclasses;
    h->tag_blocks.used = bits;
    h->tag_blocks.backed = bits + used_words(&h->tag_blocks);
    return 0;
}

/* The huge-range hint and the heap profile's header: backed now (a write
 * to a hole of a full /dev/shm would be a SIGBUS); the page heap's private
 * map starts from the hint. */
static int attach_huge_hint(tcm_heap_t *h, uint8_t *sb, tcm_handle_t state_fd)
{
    if (state_fd >= 0) {
        /* with the heap profile's header (how much of its tables is used) */
        int err = tcm__commit(state_fd, h->sl.off_huge, h->sl.off_samples - h->sl.off_huge);
        if (err)
            return err;
    }
    h->huge_hint = (_Atomic uint64_t *)(sb + h->sl.off_huge);
    uint64_t ranges = 0;
    for (uint32_t w = 0; w < (h->nranges + 63) / 64; w++) {
        h->huge[w] = atomic_load_explicit(&h->huge_hint[w], memory_order_relaxed);
        ranges += (uint64_t)__builtin_popcountll(h->huge[w]);
    }
    atomic_store(&h->huge_ranges, ranges);
    return 0;
}

bool tcm__state_back(tcm_heap_t *h, uint64_t *bits, uint64_t part_off, uint64_t from, uint64_t len, const char *what)
{
    for (uint64_t page = from / 4096; page <= (from + len - 1) / 4096; page++) {
        if (tcm__bit(bits, page))
            continue;
        int err = h->state_fd >= 0 ? tcm__commit(h->state_fd, part_off + page * 4096, 4096) : 0;
        if (err) {
            tcm__log_limited(TCM_LOG_WARN, "fallocate(state segment, %s) failed: %s", what, strerror(-err));
            return false;
        }
        tcm__bit_set(bits, page, true);
    }
    return true;
}

int tcm__heap_attach(tcm_heap_t *h, void *meta, void *state, uint32_t nroots, tcm_handle_t heap_fd, tcm_handle_t meta_fd,
                     tcm_handle_t state_fd, uint64_t heap_size, uint64_t base, uint32_t max_threads, bool fresh)
{
    uint32_t npages = (uint32_t)(heap_size >> TCM_PAGE_SHIFT);
    tcm_meta_hdr_t *m = meta;
    tcm_state_hdr_t *st = state;
    uint8_t *mb = meta, *sb = state;
    tcm__meta_layout(&h->ml, npages, nroots);
    tcm__state_layout(&h->sl, npages);
    if (fresh) {
        m->magic = TCM_META_MAGIC;
        m->version = TCM_ABI_VERSION;
        m->page_shift = TCM_PAGE_SHIFT;
        m->base = base;
        m->heap_size = heap_size;
        m->npages = npages;
        m->nclasses = TCM_NCLASSES;
        m->size = h->ml.size;
        m->off_classes = h->ml.off_classes;
        m->off_page_class = h->ml.off_page_class;
        m->off_page_span = h->ml.off_page_span;
        m->off_spans = h->ml.off_spans;
        m->off_roots = h->ml.off_roots;
        m->nroots = nroots;
        m->heap_id = tcm__random64();
        tcm__class_table_init((tcm_class_info_t *)(mb + h->ml.off_classes));
        /* the settings themselves come from tcm__config_publish */
        atomic_store(&m->config.heap_limit, heap_size);
        atomic_store(&m->config.gen, 1);
        atomic_store(&m->stats.bytes_reserved, heap_size);
        atomic_store(&m->stats.bytes_limit, heap_size);

        st->version = TCM_STATE_VERSION;
        st->born_version = TCM_STATE_VERSION;
        st->page_shift = TCM_PAGE_SHIFT;
        st->base = base;
        st->heap_size = heap_size;
        st->npages = npages;
        st->max_threads = max_threads;
        st->uid = tcm__uid();
        st->size = h->sl.size;
        st->off_clients = h->sl.off_clients;
        st->off_arenas = h->sl.off_arenas;
        st->off_holders = h->sl.off_holders;
        st->created_unix = (uint64_t)time(NULL);
        atomic_store(&st->top, 1); /* page 0 is the doorbell page */
        /* magic last (tcm__segments_open): a state segment without it is a
         * heap whose creation never finished */
    }
    h->meta = m;
    h->state = st;
    h->classes = (tcm_class_info_t *)(mb + h->ml.off_classes);
    h->page_class = mb + h->ml.off_page_class;
    h->page_span = (uint32_t *)(mb + h->ml.off_page_span);
    h->spans = (tcm_span_t *)(mb + h->ml.off_spans);
    h->roots = (tcm_root_t *)(mb + h->ml.off_roots);
    h->nroots = nroots;
    for (unsigned c = 0; c < TCM_NCLASSES; c++)
        h->arena[c] = sb + h->sl.off_arena[c];
    h->cstats = st->cstats;
    h->heap_fd = heap_fd;
    h->meta_fd = meta_fd;
    h->state_fd = state_fd;
    h->heap_size = heap_size;
    h->npages = npages;
    int err = reserve_private_maps(h, sb);
    if (err)
        return err;
    err = attach_huge_hint(h, sb, state_fd);
    if (err)
        return err;
    err = tcm__samples_attach(&h->samples, sb, &h->sl);
    if (err)
        return err;
    tcm__ph_init(h);
    h->top = atomic_load(&st->top);
    return tcm__roots_count_ht(h);
}

int tcm__roots_count_ht(tcm_heap_t *h)
{
    tcm__shares_free(&h->root_shares);
    /* at most one holder per live root: twice the table never fills */
    int err = tcm__shares_init(&h->root_shares, 2 * h->nroots);
    if (err)
        return err;
    for (uint32_t i = 0; i < h->nroots; i++) {
        uint32_t holder = atomic_load_explicit(&h->roots[i].holder, memory_order_relaxed);
        if (tcm__root_live(holder))
            tcm__shares_add(&h->root_shares, holder);
    }
    return 0;
}
