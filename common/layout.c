/* layout.c — size-class table, segment geometry and status names, computed
 * identically by the daemon, the client library and the tests. */
#include "tcm_layout.h"

#include <string.h>

const uint8_t tcm__class_lut[65] = {
    1,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
    17, 17, 18, 18, 19, 19, 20, 20, 21, 21, 22, 22, 23, 23, 24, 24, 25,
    25, 25, 25, 26, 26, 26, 26, 27, 27, 27, 27, 28, 28, 28, 28, 29, 29,
    29, 29, 30, 30, 30, 30, 31, 31, 31, 31, 32, 32, 32, 32,
};

/* The class of a size m + 1 above 1 KiB, k = floor(log2(m)): eight classes
 * per doubling (tcm__class_size); as constant expressions, so that the table
 * below is built by the compiler. Entry i is the class of sizes
 * (128 (i - 1), 128 i]; entries up to 1 KiB are never read. */
#define LOG2_(m)                                                                                              \
    ((m) >= 1u << 17 ? 17u : (m) >= 1u << 16 ? 16u : (m) >= 1u << 15 ? 15u : (m) >= 1u << 14 ? 14u          \
     : (m) >= 1u << 13 ? 13u : (m) >= 1u << 12 ? 12u : (m) >= 1u << 11 ? 11u : 10u)
#define CLASS_OF_(m) (9u + (LOG2_(m) - 7u) * 8u + (((m) >> (LOG2_(m) - 3u)) - 8u))
#define BIG1_(i) (uint8_t)((i) <= 8u ? 0u : CLASS_OF_(128u * (i) - 1u))
#define BIG4_(i) BIG1_(i), BIG1_((i) + 1u), BIG1_((i) + 2u), BIG1_((i) + 3u)
#define BIG16_(i) BIG4_(i), BIG4_((i) + 4u), BIG4_((i) + 8u), BIG4_((i) + 12u)
#define BIG64_(i) BIG16_(i), BIG16_((i) + 16u), BIG16_((i) + 32u), BIG16_((i) + 48u)
#define BIG256_(i) BIG64_(i), BIG64_((i) + 64u), BIG64_((i) + 128u), BIG64_((i) + 192u)
#define BIG1024_(i) BIG256_(i), BIG256_((i) + 256u), BIG256_((i) + 512u), BIG256_((i) + 768u)

_Static_assert(TCM_MAX_SMALL >> 7 == 2048u, "the table below has 2049 entries");
const uint8_t tcm__class_lut_big[(TCM_MAX_SMALL >> 7) + 1] = {BIG1024_(0u), BIG1024_(1024u), BIG1_(2048u)};

static const char *const status_names[] = {
#define TCM_STATUS_NAME(name, msg) #name,
    TCM_STATUS_MAP(TCM_STATUS_NAME)
#undef TCM_STATUS_NAME
};
static const char *const status_msgs[] = {
#define TCM_STATUS_MSG(name, msg) msg,
    TCM_STATUS_MAP(TCM_STATUS_MSG)
#undef TCM_STATUS_MSG
};

const char *tcm__status_name(int status)
{
    return status >= 0 && status < TCM_ST__COUNT ? status_names[status] : "UNKNOWN";
}

const char *tcm__status_msg(int status)
{
    return status >= 0 && status < TCM_ST__COUNT ? status_msgs[status] : "unknown status";
}

/* Classes 1..8 step 16 up to 128 B; above, eight classes per doubling, so
 * rounding never wastes more than 1/8 of the request. */
uint32_t tcm__class_size(unsigned cls)
{
    if (cls == 0 || cls >= TCM_NCLASSES)
        return 0;
    if (cls <= 8)
        return 16u * cls;
    unsigned j = cls - 9, k = 7 + j / 8, idx = j % 8;
    return (1u << k) + (idx + 1) * (1u << (k - 3));
}

static uint32_t clamp_u32(uint64_t v, uint32_t lo, uint32_t hi)
{
    return v < lo ? lo : v > hi ? hi : (uint32_t)v;
}

void tcm__class_table_init(tcm_class_info_t tab[TCM_NCLASSES])
{
    tab[0] = (tcm_class_info_t){0};
    for (unsigned c = 1; c < TCM_NCLASSES; c++) {
        tcm_class_info_t *ci = &tab[c];
        uint32_t size = tcm__class_size(c);
        /* A span is at least 64 KiB and holds at least one object; its tail
         * waste stays within 1/8. Large classes get spans of a few objects or
         * one: a span of eight 256 KiB objects stays committed while any one
         * of them lives (larson between two processes, committed at steady
         * state 103 -> 90 MB with 35 MB live). */
        uint64_t want = size < 65536 ? 65536 : size;
        uint32_t pages = (uint32_t)((want + TCM_PAGE_SIZE - 1) / TCM_PAGE_SIZE);
        while (((uint64_t)pages * TCM_PAGE_SIZE) % size > (uint64_t)pages * TCM_PAGE_SIZE / 8)
            pages++;
        ci->size = size;
        ci->span_pages = pages;
        ci->span_objs = (uint32_t)((uint64_t)pages * TCM_PAGE_SIZE / size);
        /* Limits in bytes, not objects, so large classes are not starved:
         * a batch moves up to TCM_BATCH_BYTES (at most TCM_MAX_BATCH
         * objects; the drop-in's private heap less: tcm__class_batches), a thread bin may
         * grow to 16 MiB (a thread of a one- or two-thread process keeps 64
         * objects of the largest class, the seed's batch, without trading
         * half of them through the transfer tier), the transfer tier to
         * 16 MiB of one class (at most 65536 objects: at 8192, 128 KiB of
         * 16-byte objects, threads that come and go handed most of their
         * small objects to tcmd and the next ones refilled from it;
         * docs/BENCHMARKS.md, test-stress); the byte budgets (per thread,
         * per process) bound the total. */
        ci->batch = clamp_u32(TCM_BATCH_BYTES / size, 4, TCM_MAX_BATCH);
        ci->tcache_cap = clamp_u32((16u << 20) / size, 2 * ci->batch, 4096);
        ci->xfer_cap = clamp_u32((16u << 20) / size, 2 * ci->batch, 65536);
        ci->recip = (uint32_t)(((1ull << 32) + size - 1) / size);
        ci->reserved = 0;
    }
}

/* Smaller batches only: the arrays' sizes (tcache_cap, xfer_cap: the
 * channel layout) stay those the default batch gave. */
void tcm__class_batches(tcm_class_info_t tab[TCM_NCLASSES], uint32_t bytes)
{
    if (bytes >= TCM_BATCH_BYTES)
        return;
    for (unsigned c = 1; c < TCM_NCLASSES; c++)
        tab[c].batch = clamp_u32(bytes / tab[c].size, 4, TCM_MAX_BATCH);
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) & ~(a - 1);
}

void tcm__chan_layout(tcm_chan_layout_t *l, const tcm_class_info_t tab[TCM_NCLASSES],
                      uint32_t max_threads, bool served_inline)
{
    l->max_threads = max_threads;
    /* one per thread cache, a shared spare, and each thread's async slots */
    l->nslots = max_threads + 1 + max_threads * TCM_ASYNC_SLOTS;
    l->ring_cap = 1;
    while (l->ring_cap < (served_inline ? max_threads + 1 : l->nslots))
        l->ring_cap <<= 1;
    l->off_ring = align_up(sizeof(tcm_chan_hdr_t), 4096);
    uint64_t off = l->off_ring + sizeof(tcm_ring_t) + (uint64_t)l->ring_cap * sizeof(tcm_ring_cell_t);
    l->off_slots = align_up(off, 4096);
    off = l->off_slots + (uint64_t)l->nslots * sizeof(tcm_slot_t);

    uint64_t stride = sizeof(tcm_tcache_t);
    l->bin_objs_off[0] = 0;
    for (unsigned c = 1; c < TCM_NCLASSES; c++) {
        l->bin_objs_off[c] = (uint32_t)stride;
        stride += (uint64_t)tab[c].tcache_cap * sizeof(void *);
    }
    stride = align_up(stride, 4096);
    l->drain_off = (uint32_t)stride;
    for (unsigned c = 0; c < TCM_NCLASSES; c++) {
        l->drain_objs_off[c] = (uint32_t)stride;
        stride += (uint64_t)(c ? tcm__drain_cap(&tab[c]) : 0) * sizeof(void *);
    }
    l->drain_bytes = (uint32_t)(stride - l->drain_off);
    l->first_off = 0;
    if (served_inline) { /* tcmd reads a shared channel's bins where bin_objs_off puts them */
        l->first_off = (uint32_t)stride;
        stride += (uint64_t)TCM_NCLASSES * TCM_FIRST_BIN * sizeof(void *);
    }
    l->tcache_stride = align_up(stride, 4096);
    l->off_tcaches = align_up(off, 4096);
    off = l->off_tcaches + (uint64_t)max_threads * l->tcache_stride;

    l->off_xfer = align_up(off, 4096);
    uint64_t xoff = 0;
    l->xfer_objs_off[0] = 0;
    for (unsigned c = 1; c < TCM_NCLASSES; c++) {
        l->xfer_objs_off[c] = (uint32_t)xoff;
        xoff += (uint64_t)tab[c].xfer_cap * sizeof(void *);
    }
    l->size = align_up(l->off_xfer + xoff, 4096);
}

void tcm__meta_layout(tcm_meta_layout_t *l, uint32_t npages, uint32_t nroots)
{
    uint64_t off = align_up(sizeof(tcm_meta_hdr_t), 4096);
    l->off_classes = off;
    off = align_up(off + TCM_NCLASSES * sizeof(tcm_class_info_t), 4096);
    l->off_roots = off;
    off = align_up(off + (uint64_t)nroots * sizeof(tcm_root_t), 4096);
    l->off_page_class = off;
    off = align_up(off + npages, 4096);
    l->off_page_span = off;
    off = align_up(off + (uint64_t)npages * sizeof(uint32_t), 4096);
    l->off_spans = off;
    off = align_up(off + ((uint64_t)npages + 1) * sizeof(tcm_span_t), 4096);
    l->size = off;
}

void tcm__state_layout(tcm_state_layout_t *l, uint32_t npages)
{
    tcm_class_info_t tab[TCM_NCLASSES];
    tcm__class_table_init(tab);
    uint64_t off = align_up(sizeof(tcm_state_hdr_t), 4096);
    l->off_clients = off;
    off = align_up(off + TCM_CLIENTS_MAX * sizeof(tcm_client_rec_t), 4096);
    l->off_remap = off;
    off = align_up(off + 65536 * sizeof(uint16_t), 4096);
    l->off_holders = off;
    off = align_up(off + (TCM_HOLDERS + TCM_HOLDER_GROUPS) * sizeof(tcm_holder_t), 4096);
    l->off_arenas = off;
    /* One arena per class, each 4 KiB aligned so that trimming one never
     * touches another's pages; room for as many spans of the class as the
     * heap could hold. A record is one span's: its object bits, then an owner
     * word per word of bits. */
    l->rec_bytes[0] = l->owners_off[0] = l->max_recs[0] = 0;
    l->off_arena[0] = off;
    for (unsigned c = 1; c < TCM_NCLASSES; c++) {
        uint32_t words = (tab[c].span_objs + 63) / 64;
        l->owners_off[c] = words * 8;
        l->rec_bytes[c] = (uint32_t)align_up(words * 8 + words * 4, 8); /* the next record's bits: 8-aligned */
        l->max_recs[c] = npages / tab[c].span_pages;
        l->off_arena[c] = off;
        off = align_up(off + (uint64_t)l->max_recs[c] * l->rec_bytes[c], 4096);
    }
    /* a tag block for every word of object bits the heap could hold (a
     * word covers at least 1 KiB of heap), within what an owner word can
     * name */
    uint64_t blocks = (uint64_t)npages * (TCM_PAGE_SIZE / TCM_ALIGN / 64);
    l->max_tag_blocks = (uint32_t)(blocks < TCM_OWNER_BLOCK - 1 ? blocks : TCM_OWNER_BLOCK - 1);
    l->reserved = 0;
    l->off_tag_blocks = off;
    off = align_up(off + (uint64_t)l->max_tag_blocks * TCM_TAG_BLOCK, 4096);
    l->off_huge = off;
    off = align_up(off + ((uint64_t)npages / TCM_HUGE_PAGES + 63) / 64 * 8, 4096);
    l->off_profile = off;
    off += 4096;
    l->off_samples = off;
    off += (uint64_t)TCM_SAMPLES * sizeof(tcm_sample_t);
    l->off_sample_procs = off;
    off += (uint64_t)TCM_SAMPLE_PROCS * sizeof(tcm_sample_proc_t);
    l->size = off;
}

uint32_t tcm__root_hash(const char *name, uint32_t mask)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h & mask;
}

uint32_t tcm__root_read(const tcm_root_t *r, uint64_t *off, char name[TCM_ROOT_NAME_MAX])
{
    uint64_t words[TCM_ROOT_NAME_MAX / 8];
    uint32_t holder;
    for (;;) {
        uint32_t seq = atomic_load_explicit(&r->seq, memory_order_acquire);
        if (seq & 1)
            continue;
        holder = atomic_load_explicit(&r->holder, memory_order_relaxed);
        *off = atomic_load_explicit(&r->off, memory_order_relaxed);
        for (unsigned i = 0; i < TCM_ROOT_NAME_MAX / 8; i++)
            words[i] = atomic_load_explicit(&r->name[i], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&r->seq, memory_order_relaxed) == seq)
            break;
    }
    memcpy(name, words, TCM_ROOT_NAME_MAX);
    name[TCM_ROOT_NAME_MAX - 1] = 0;
    return holder;
}

int tcm__root_find(const tcm_root_t *roots, uint32_t nroots, const char *name, uint64_t *off)
{
    uint32_t mask = nroots - 1, at = tcm__root_hash(name, mask);
    for (uint32_t i = 0; i < nroots; i++, at = (at + 1) & mask) {
        char cur[TCM_ROOT_NAME_MAX];
        uint32_t holder = tcm__root_read(&roots[at], off, cur);
        if (!holder)
            break;
        if (tcm__root_live(holder) && strcmp(cur, name) == 0)
            return (int)at;
    }
    return -1;
}

uint32_t tcm__root_write_begin(tcm_root_t *r)
{
    uint32_t seq = atomic_load_explicit(&r->seq, memory_order_relaxed);
    if (!(seq & 1)) /* odd already: a write a crash interrupted, which this one completes */
        atomic_store_explicit(&r->seq, ++seq, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    return seq;
}

void tcm__root_write_data(tcm_root_t *r, const char *name, uint64_t off, uint32_t holder)
{
    uint64_t words[TCM_ROOT_NAME_MAX / 8] = {0};
    bool del = off == UINT64_MAX;
    if (!del)
        memcpy(words, name, strnlen(name, TCM_ROOT_NAME_MAX - 1));
    for (unsigned i = 0; i < TCM_ROOT_NAME_MAX / 8; i++)
        atomic_store_explicit(&r->name[i], words[i], memory_order_relaxed);
    atomic_store_explicit(&r->off, del ? 0 : off, memory_order_relaxed);
    atomic_store_explicit(&r->holder, del ? TCM_ROOT_DELETED : holder, memory_order_relaxed);
}

void tcm__root_write_end(tcm_root_t *r, uint32_t seq)
{
    atomic_store_explicit(&r->seq, seq + 1, memory_order_release);
}

void tcm__root_write(tcm_root_t *r, const char *name, uint64_t off, uint32_t holder)
{
    uint32_t seq = tcm__root_write_begin(r);
    tcm__root_write_data(r, name, off, holder);
    tcm__root_write_end(r, seq);
}

bool tcm__root_repair(tcm_root_t *r, uint64_t heap_size, bool *kept)
{
    uint32_t seq = atomic_load_explicit(&r->seq, memory_order_relaxed);
    *kept = false;
    if (!(seq & 1))
        return false;
    /* The writer stores the name, then the offset, then the holder: a root
     * being set under its own name is whole with either offset; a new one
     * is still unused or a tombstone; one being deleted has offset 0 or an
     * empty name. So a root that reads as valid is the old value or the
     * new one; one that does not becomes a tombstone (never "unused": a
     * probe may have to go on past it). */
    uint64_t words[TCM_ROOT_NAME_MAX / 8];
    for (unsigned i = 0; i < TCM_ROOT_NAME_MAX / 8; i++)
        words[i] = atomic_load_explicit(&r->name[i], memory_order_relaxed);
    const char *name = (const char *)words;
    uint64_t off = atomic_load_explicit(&r->off, memory_order_relaxed);
    uint32_t holder = atomic_load_explicit(&r->holder, memory_order_relaxed);
    size_t len = strnlen(name, TCM_ROOT_NAME_MAX);
    if (!tcm__root_live(holder) ||
        (len > 0 && len < TCM_ROOT_NAME_MAX && off >= TCM_PAGE_SIZE && off < heap_size)) {
        *kept = tcm__root_live(holder);
        tcm__root_write_end(r, seq);
    } else {
        tcm__root_write(r, "", UINT64_MAX, 0);
    }
    return true;
}
