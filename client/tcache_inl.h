/* tcache_inl.h — the hot path. A hit is a class lookup, one load of the
 * thread's tcache pointer, (malloc) a subtract from the heap profile's
 * countdown and a push or pop on a bin array: no locked
 * instruction, no fence, no lock, no syscall. A free also loads the three
 * hot globals (heap base, its size in granules, the page map), relaxed
 * atomic loads: plain moves on x86-64 and AArch64, atomic only because
 * the thread that attaches stores them while other threads may be here (a
 * free before the attach sees 0 granules and goes to the slow path).
 * Everything else is in the slow paths, TCM_NOINLINE or TCM_COLD
 * (tcm_compiler.h), which a miss calls. */
#ifndef TCM_TCACHE_INL_H
#define TCM_TCACHE_INL_H

#include "client.h"
#include "tcache.h"

/* What a miss calls; libtcm-malloc.so puts its own wrappers here. */
#ifndef TCM_MALLOC_SLOW
#define TCM_MALLOC_SLOW tcm__malloc_slow
#define TCM_FREE_SLOW tcm__free_slow
#define TCM_FREE_OUTGROWN_SLOW tcm__free_outgrown
#endif

/* malloc's hit, and miss(size) for everything else (a constant: inlined,
 * a direct call) */
static inline void *tcm__malloc_hit_or(size_t size, void *(*miss)(size_t))
{
    unsigned cls;
    if (tcm_likely(size <= 1024))
        cls = tcm__class_lut[(size + 15) >> 4];
    else if (size <= TCM_MAX_SMALL)
        cls = tcm__size_class(size);
    else
        return miss(size);
    tcm_bin_t *b = &tcm__hot.tc->bins[cls];
    uint32_t n = b->count;
    /* the heap profile's countdown: one subtract and branch (profile.c) */
    if (tcm_likely(n != 0) && tcm_likely((tcm__hot.sample_left -= (int64_t)size) >= 0)) {
        b->count = n - 1;
        return b->objs[n - 1];
    }
    return miss(size);
}

static inline void *tcm__malloc_fast(size_t size)
{
    return tcm__malloc_hit_or(size, TCM_MALLOC_SLOW);
}

/* The page class of heap block p, or false for a pointer that is not the
 * heap's. Rotating the offset right by 4 moves any misaligned low bits to
 * the top, so one compare rejects both "outside the heap" and "not
 * 16-byte aligned" (including NULL and frees before attaching). */
static inline bool tcm__page_class_of(const void *p, unsigned *pc)
{
    uintptr_t off = (uintptr_t)p - atomic_load_explicit(&tcm__heap_base, memory_order_relaxed);
    uintptr_t granule = off >> TCM_GRANULE_SHIFT | off << (64 - TCM_GRANULE_SHIFT);
    if (tcm_unlikely(granule >= atomic_load_explicit(&tcm__heap_granules, memory_order_relaxed)))
        return false;
    *pc = atomic_load_explicit(&tcm__page_class, memory_order_relaxed)[granule >> (TCM_PAGE_SHIFT - TCM_GRANULE_SHIFT)];
    return true;
}

/* The bin a free of p goes to (by its page's class: a page run's, a
 * draining span's and a free page's never have room), or NULL for a
 * pointer that is not the heap's. */
static inline tcm_bin_t *tcm__free_bin(const void *p, unsigned *pc)
{
    return tcm__page_class_of(p, pc) ? &tcm__hot.tc->bins[*pc] : NULL;
}

/* The small class of the block p, or 0 for anything else (outside the
 * heap, misaligned, a page run, a span tcmd is draining). */
static inline unsigned tcm__small_class_of(const void *p)
{
    unsigned pc;
    return tcm__page_class_of(p, &pc) && pc < TCM_NCLASSES ? pc : 0;
}

static inline void tcm__free_fast(void *p)
{
    unsigned pc;
    tcm_bin_t *b = tcm__free_bin(p, &pc);
    if (tcm_likely(b != NULL)) {
        uint32_t n = b->count;
        if (tcm_likely(n < b->max)) {
            b->objs[n] = p;
            b->count = n + 1;
            return;
        }
    }
    TCM_FREE_SLOW(p);
}

/* realloc's free of the block it moved into a larger class: as free's hit
 * while its bin holds less than TCM_OUTGROWN_BYTES; at that mark, or for
 * anything the hit would not take, tcm__free_outgrown (tcache.c) */
static inline void tcm__free_outgrown_fast(void *p)
{
    unsigned cls;
    tcm_bin_t *b = tcm__free_bin(p, &cls);
    if (tcm_likely(b != NULL)) {
        uint32_t n = b->count;
        if (tcm_likely(n < b->max && cls < TCM_NCLASSES) &&
            tcm_likely((uint64_t)(n + 1) * tcm__proc.classes[cls].size < TCM_OUTGROWN_BYTES)) {
            b->objs[n] = p;
            b->count = n + 1;
            return;
        }
    }
    TCM_FREE_OUTGROWN_SLOW(p);
}

/* The size of the smallest class of at least size bytes whose objects are
 * aligned to alignment (spans start on pages, and objects sit at
 * multiples of their size), or 0: none (a page run serves it). */
static inline size_t tcm__aligned_class(size_t alignment, size_t size)
{
    if (size > TCM_MAX_SMALL || alignment > TCM_PAGE_SIZE)
        return 0;
    for (unsigned c = tcm__size_class(size ? size : 1); c < TCM_NCLASSES; c++) {
        uint32_t cs = tcm__class_size(c);
        if (cs % alignment == 0)
            return cs;
    }
    return 0;
}

/* The size realloc gives a small block it moves up: the next of four
 * sizes a doubling (jemalloc's classes), not the next of tcm's (16 bytes
 * apart up to 1 KiB, eight a doubling above), so that a buffer grown a few
 * bytes at a time moves as often as under jemalloc. */
static inline size_t tcm__realloc_headroom(size_t size)
{
    if (size <= 64 || size > TCM_MAX_SMALL)
        return size;
    size_t step = (size_t)1 << (61 - __builtin_clzll(size - 1)); /* a quarter of the power of two below */
    return (size + step - 1) & ~(step - 1);
}

/* realloc's move of a small heap block into another class, through the
 * hit paths (old: its class's size); each library wraps it out of line,
 * so that a realloc that keeps its block saves no registers */
static inline void *tcm__realloc_move(void *p, size_t size, size_t old)
{
    void *q = tcm__malloc_fast(size > old ? tcm__realloc_headroom(size) : size);
    if (!q)
        return NULL;
    memcpy(q, p, old < size ? old : size);
    if (size > old)
        tcm__free_outgrown_fast(p);
    else
        tcm__free_fast(p);
    return q;
}

#endif
