/* preload.c — libtcm-malloc.so: tcm as the process's malloc, by
 * LD_PRELOAD. By default the heap is the process's own (local.c): tcm's
 * tiers over private memory, served in the process, gone with it, copied
 * on write by fork. TCM_MALLOC_FORK=shared makes it tcmd's shared heap
 * instead, which fork children share (libtcm's behaviour). Three kinds of
 * pointer, told apart by address in free(): the heap's (tcm's hot path), a
 * small bootstrap region (what is allocated before the system malloc is
 * found), and the system malloc's (tcm__next_symbol): what the library's
 * own code allocates (tcm__in_library), and everything once tcm cannot
 * serve (no heap: one line on stderr, then the system malloc for the rest
 * of the process; a full heap: that allocation; TCM_MALLOC_FALLBACK=0 makes
 * those fail with ENOMEM instead). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "lifecycle.h"
#include "local.h"
#include "preload.h"
#include "prim.h"
#include "tcache.h"

static void *malloc_missed(size_t size);
static void free_missed(void *p);
static void outgrown_missed(void *p);
#define TCM_MALLOC_SLOW malloc_missed
#define TCM_FREE_SLOW free_missed
#define TCM_FREE_OUTGROWN_SLOW outgrown_missed
#include "tcache_inl.h"
#include "tcm.h"

#define TCM_EXPORT __attribute__((visibility("default")))

/* ---- the system malloc, and the bootstrap region before it is found */

static void *(*sys_malloc)(size_t);
static void (*sys_free)(void *);
static void *(*sys_calloc)(size_t, size_t);
static void *(*sys_realloc)(void *, size_t);
static void *(*sys_memalign)(size_t, size_t);
static size_t (*sys_usable)(void *);

#define BOOT_BYTES (256u << 10)
static _Alignas(64) unsigned char boot[BOOT_BYTES];
static _Atomic size_t boot_used;

/* 16-byte header: the block's size, for realloc and malloc_usable_size.
 * Never freed (dlsym's and the loader's few early allocations). */
TCM_COLD static void *boot_alloc(size_t size, size_t align)
{
    if (align < 16)
        align = 16;
    for (;;) {
        size_t used = atomic_load(&boot_used);
        size_t start = (used + 16 + align - 1) & ~(align - 1);
        if (start + size > BOOT_BYTES || start + size < start) {
            errno = ENOMEM;
            return NULL;
        }
        if (atomic_compare_exchange_weak(&boot_used, &used, start + size)) {
            ((size_t *)(boot + start))[-1] = size;
            return boot + start;
        }
    }
}

static bool in_boot(const void *p)
{
    return (const unsigned char *)p >= boot && (const unsigned char *)p < boot + BOOT_BYTES;
}

static size_t boot_size(const void *p)
{
    return ((const size_t *)p)[-1];
}

static _Atomic int resolving;

TCM_COLD static void resolve_symbols(void)
{
    if (atomic_exchange(&resolving, 1))
        return; /* being found (dlsym's own allocations come here) */
    sys_calloc = (void *(*)(size_t, size_t))tcm__next_symbol("calloc");
    sys_realloc = (void *(*)(void *, size_t))tcm__next_symbol("realloc");
    sys_memalign = (void *(*)(size_t, size_t))tcm__next_symbol("memalign");
    sys_usable = (size_t(*)(void *))tcm__next_symbol("malloc_usable_size");
    sys_free = (void (*)(void *))tcm__next_symbol("free");
    sys_malloc = (void *(*)(size_t))tcm__next_symbol("malloc");
}

static inline void resolve(void)
{
    if (tcm_unlikely(!sys_malloc))
        resolve_symbols();
}

/* ---- which allocator serves a request */

enum { USE_TCM, USE_SYSTEM };
static _Atomic int mode = USE_TCM;
static bool fallback = true;        /* TCM_MALLOC_FALLBACK */
static bool shares;                 /* TCM_MALLOC_FORK=shared: tcmd's heap, not a private one */
static _Atomic bool said_full;

/* The tcm_* functions a program calls: libtcm.so's when the program links
 * it and the heap here is private (its shared memory is libtcm's to
 * serve), else this library's own (client/dropin_names.h). */
static struct {
#define TCM_NEXT_FIELD(f) __typeof__(tcm__own_##f) *f;
    TCM_DROPIN_NAMES(TCM_NEXT_FIELD)
#undef TCM_NEXT_FIELD
} api;

TCM_COLD static void read_settings_once(void)
{
    const char *f = tcm__env("TCM_MALLOC_FALLBACK");
    fallback = !(f && strcmp(f, "0") == 0);
    const char *k = tcm__env("TCM_MALLOC_FORK");
    shares = k && strcmp(k, "shared") == 0;
    tcm__attach_failed_note =
        fallback ? "; going on with the system malloc" : "; allocations fail (TCM_MALLOC_FALLBACK=0)";
    if (!shares)
        tcm__local_use();
}

/* At a program's first call of a tcm_* function (dlsym allocates: from the
 * system malloc, as libtcm's own code does). */
TCM_COLD static void resolve_api_once(void)
{
    tcm__library_enter();
#define TCM_NEXT_RESOLVE(f)                                                                        \
    if (!shares)                                                                                   \
        api.f = (__typeof__(api.f))tcm__next_symbol("tcm_" #f);                                    \
    if (!api.f)                                                                                    \
        api.f = tcm__own_##f;
    TCM_DROPIN_NAMES(TCM_NEXT_RESOLVE)
#undef TCM_NEXT_RESOLVE
    tcm__library_leave();
}

/* The settings, read at the first allocation tcm serves or refuses: the
 * libraries this one depends on (libstdc++) allocate before its
 * constructor runs. */
static void read_settings(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_settings_once);
}

TCM_COLD __attribute__((constructor)) static void preload_init(void)
{
    resolve();
    read_settings();
}

TCM_NOINLINE static void *system_alloc(size_t size, size_t align)
{
    resolve();
    if (!sys_malloc)
        return boot_alloc(size, align);
    return align > 16 ? sys_memalign(align, size) : sys_malloc(size);
}

/* tcm could not serve: without a heap (a private one that could not be
 * made, tcmd not there or lost for good) the rest of the process uses the
 * system malloc (a thread's bins serve what they hold first); a full heap
 * only this once. */
TCM_COLD static void *after_refusal(size_t size, size_t align)
{
    if (!fallback) {
        errno = ENOMEM;
        return NULL;
    }
    if (!atomic_load(&tcm__proc.attached)) {
        atomic_store(&mode, USE_SYSTEM); /* tcm_init said so, in one line */
    } else if (tcm__proc.daemon_lost) {
        if (atomic_exchange(&mode, USE_SYSTEM) == USE_TCM)
            fprintf(stderr, "tcm-malloc: tcmd is gone: going on with the system malloc\n");
    } else if (!atomic_exchange(&said_full, true)) {
        fprintf(stderr, "tcm-malloc: %s: allocations it refuses come from the system malloc\n",
                shares ? "the shared heap refused one (it is full, or this process holds its quota: tcmctl quota)"
                       : "the private heap is full (TCM_MALLOC_HEAP_SIZE)");
    }
    return system_alloc(size, align);
}

static inline bool served_by_tcm(void)
{
    return atomic_load_explicit(&mode, memory_order_relaxed) == USE_TCM && !tcm__in_library;
}

static inline bool in_heap(const void *p)
{
    return (uintptr_t)p - atomic_load_explicit(&tcm__heap_base, memory_order_relaxed) <
           atomic_load_explicit(&tcm__heap_bytes, memory_order_relaxed);
}

/* tcm's slow paths, with the library's own allocations sent elsewhere:
 * malloc's hit path leaves those to its miss (client.h,
 * tcm__hot_cache_set), and every allocation once tcm cannot serve */
TCM_NOINLINE static void *tcm_slow(size_t size, size_t align)
{
    if (!served_by_tcm())
        return system_alloc(size, align);
    read_settings();
    tcm__library_enter();
    void *p = align > 16 ? tcm_aligned_alloc(align, size) : tcm__malloc_slow(size);
    tcm__library_leave();
    return p ? p : after_refusal(size, align);
}

/* a forwarder, inlined as the jump to tcm_slow */
static void *malloc_missed(size_t size)
{
    return tcm_slow(size, 0);
}

/* A free the hot path did not take: a heap object whose bin is full, or a
 * pointer that is not the heap's (the hot path's one range check routes
 * both here). */
TCM_NOINLINE static void free_missed(void *p)
{
    if (in_heap(p)) {
        tcm__library_enter();
        tcm__free_slow(p); /* a misaligned one: tcm's "invalid pointer" */
        tcm__library_leave();
        return;
    }
    if (!p || in_boot(p))
        return;
    resolve();
    sys_free(p);
}

/* realloc's free of a heap block it moved into a larger class, past the
 * hit's (tcm__free_outgrown_fast) */
TCM_NOINLINE static void outgrown_missed(void *p)
{
    tcm__library_enter();
    tcm__free_outgrown(p);
    tcm__library_leave();
}

/* ---- the malloc family */

/* Its hit needs no test of served_by_tcm(): a thread in the library's own
 * code sees the empty cache, and so does one not registered, which every
 * thread is while tcm cannot serve (a thread that was keeps what its bins
 * hold: heap blocks, still mapped) */
TCM_EXPORT void *malloc(size_t size)
{
    return tcm__malloc_fast(size);
}

TCM_EXPORT void free(void *p)
{
    tcm__free_fast(p);
}

/* C++'s operators jump here (preload_new.cpp), not to malloc and free: a
 * call of the exported ones from within the library would cost a call and
 * the PLT's jump more than a C program's malloc pays. new's miss is C++'s
 * loop (the new_handler, std::bad_alloc), which calls malloc; delete is
 * free, bound inside the library. */
void *tcm__preload_new(size_t size)
{
    return tcm__malloc_hit_or(size, tcm__new_missed);
}

void tcm__preload_free(void *p) __attribute__((alias("free"), nothrow, leaf)); /* (free's, from <stdlib.h>) */

/* calloc of a page run: tcm clears only what may not read zero
 * (tcm__calloc_large); the system's block after a refusal is cleared here */
TCM_NOINLINE static void *calloc_large(size_t size)
{
    read_settings();
    tcm__library_enter();
    void *p = tcm__calloc_large(size);
    tcm__library_leave();
    if (p)
        return p;
    if ((p = after_refusal(size, 0)))
        memset(p, 0, size);
    return p;
}

TCM_EXPORT void *calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (!served_by_tcm()) {
        resolve();
        return sys_calloc ? sys_calloc(n, size) : boot_alloc(total, 0); /* the region is zero */
    }
    if (total > TCM_MAX_SMALL)
        return calloc_large(total);
    void *p = tcm__malloc_fast(total); /* (malloc's hit inlined: no call of it) */
    if (p) /* a reused object, or the system's when tcm refused */
        memset(p, 0, total);
    return p;
}

static size_t usable(const void *p)
{
    if (in_heap(p))
        return tcm_usable_size(p);
    if (in_boot(p))
        return boot_size(p);
    resolve();
    return sys_usable((void *)p);
}

/* everything but a small heap block's realloc served by tcm */
TCM_NOINLINE static void *realloc_slow(void *p, size_t size)
{
    if (!p)
        return malloc(size);
    if (size == 0) {
        free(p);
        return NULL;
    }
    bool heap = in_heap(p); /* else the bootstrap arena's */
    if (!heap && !in_boot(p)) { /* the system's stays the system's */
        resolve();
        return sys_realloc(p, size);
    }
    size_t old = usable(p);
    if (heap && tcm__realloc_keeps(old, size))
        return p;
    bool grows = heap && size > old;
    void *q = malloc(grows ? tcm__realloc_headroom(size) : size);
    if (!q)
        return NULL;
    memcpy(q, p, old < size ? old : size);
    if (grows)
        tcm__free_outgrown_fast(p);
    else
        free(p);
    return q;
}

TCM_NOINLINE static void *realloc_move(void *p, size_t size, size_t old)
{
    return tcm__realloc_move(p, size, old);
}

/* A string grown a few bytes at a time comes here tens of times a class:
 * a small block that keeps its class returns before anything is saved.
 * (One that moves does so through malloc's and free's hit paths, which
 * send the library's own calls and everything tcm cannot serve to their
 * misses: no test of served_by_tcm() here either.) */
TCM_EXPORT void *realloc(void *p, size_t size)
{
    unsigned cls = tcm__small_class_of(p);
    if (tcm_likely(cls != 0) && tcm_likely(size != 0)) {
        size_t old = tcm__proc.classes[cls].size;
        if (tcm__realloc_keeps(old, size))
            return p;
        return realloc_move(p, size, old);
    }
    return realloc_slow(p, size);
}

TCM_EXPORT void *reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, total);
}

/* What a class of size cs is aligned to, up to a page (tcm__aligned_class) */
static size_t class_alignment(size_t cs)
{
    size_t a = cs & -cs;
    return a < TCM_PAGE_SIZE ? a : TCM_PAGE_SIZE;
}

/* The miss of an aligned allocation a class serves: as malloc's, but the
 * system's fallback keeps the alignment */
TCM_NOINLINE static void *class_missed(size_t cs)
{
    return tcm_slow(cs, class_alignment(cs));
}

/* An alignment a class gives takes malloc's hit for that class (as
 * tcm_aligned_alloc does, which the drop-in calls only inside the library,
 * where the hit path sees the empty cache); a larger one, a page run. */
static void *aligned(size_t align, size_t size)
{
    if (align <= 16)
        return malloc(size);
    size_t cs = tcm__aligned_class(align, size);
    return cs ? tcm__malloc_hit_or(cs, class_missed) : tcm_slow(size, align);
}

TCM_EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    void *p = aligned(align, size);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

TCM_EXPORT void *aligned_alloc(size_t align, size_t size)
{
    if (align == 0 || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    return aligned(align, size);
}

TCM_EXPORT void *memalign(size_t align, size_t size)
{
    return aligned_alloc(align, size);
}

TCM_EXPORT void *valloc(size_t size)
{
    return aligned(tcm__os_page_size(), size);
}

TCM_EXPORT void *pvalloc(size_t size)
{
    size_t page = tcm__os_page_size();
    return aligned(page, (size + page - 1) & ~(page - 1));
}

TCM_EXPORT size_t malloc_usable_size(void *p)
{
    return p ? usable(p) : 0;
}

/* C++'s operators call these (preload_new.cpp). */
void *tcm__preload_aligned(size_t align, size_t size)
{
    return aligned(align, size);
}

/* The drop-in links no C++ runtime (preload_new.cpp): the program's, after
 * this library in the search order, or one a library loaded privately. */
void *tcm__cxx_runtime_symbol(const char *name)
{
    void *f = tcm__next_symbol(name);
    if (!f)
        f = tcm__loaded_symbol("libstdc++.so.6", name);
    if (!f)
        f = tcm__loaded_symbol("libc++.so.1", name);
    return f;
}

/* ---- tcm.h's functions, for a program that calls them (see api) */

static void resolve_api(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    read_settings();
    pthread_once(&once, resolve_api_once);
}

#undef tcm_init
#undef tcm_shutdown
#undef tcm_malloc
#undef tcm_calloc
#undef tcm_realloc
#undef tcm_aligned_alloc
#undef tcm_free
#undef tcm_free_sized
#undef tcm_usable_size
#undef tcm_to_offset
#undef tcm_from_offset
#undef tcm_root_set
#undef tcm_root_get
#undef tcm_root_create
#undef tcm_root_replace
#undef tcm_stat

/* Each exported tcm_X calls api.X (the drop-in's own, or libtcm.so's). */
#define TCM_WRAP(ret, f, params, args)                                                             \
    TCM_EXPORT ret tcm_##f params                                                                  \
    {                                                                                              \
        resolve_api();                                                                             \
        return api.f args;                                                                         \
    }
#define TCM_WRAP_VOID(f, params, args)                                                             \
    TCM_EXPORT void tcm_##f params                                                                 \
    {                                                                                              \
        resolve_api();                                                                             \
        api.f args;                                                                                \
    }
TCM_WRAP(int, init, (const char *socket_path), (socket_path))
TCM_WRAP_VOID(shutdown, (void), ())
TCM_WRAP(void *, malloc, (size_t size), (size))
TCM_WRAP(void *, calloc, (size_t n, size_t size), (n, size))
TCM_WRAP(void *, realloc, (void *p, size_t size), (p, size))
TCM_WRAP(void *, aligned_alloc, (size_t alignment, size_t size), (alignment, size))
TCM_WRAP_VOID(free, (void *p), (p))
TCM_WRAP_VOID(free_sized, (void *p, size_t size), (p, size))
TCM_WRAP(size_t, usable_size, (const void *p), (p))
TCM_WRAP(uint64_t, to_offset, (const void *p), (p))
TCM_WRAP(void *, from_offset, (uint64_t off), (off))
TCM_WRAP(int, root_set, (const char *name, void *p), (name, p))
TCM_WRAP(void *, root_get, (const char *name), (name))
TCM_WRAP(int, root_create, (const char *name, void *p), (name, p))
TCM_WRAP(int, root_replace, (const char *name, void *expected, void *desired), (name, expected, desired))
TCM_WRAP(int, stat, (const char *name, uint64_t *value), (name, value))
