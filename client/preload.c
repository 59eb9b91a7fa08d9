/* preload.c — libtcm-malloc.so: tcm as the process's malloc, by
 * LD_PRELOAD. Three kinds of pointer, told apart by address in free():
 * the shared heap's (tcm's hot path), a small bootstrap region (what is
 * allocated before the system malloc is found), and the system malloc's
 * (tcm__next_symbol): what the library's own code allocates (tcm__in_library),
 * everything once tcm cannot serve (no tcmd: one line on stderr, then the
 * system malloc for the rest of the process; a full heap: that allocation;
 * TCM_MALLOC_FALLBACK=0 makes those fail with ENOMEM instead), and a fork
 * child's (below). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "lifecycle.h"
#include "preload.h"
#include "prim.h"
#include "tcache.h"

static void *malloc_missed(size_t size);
static void free_missed(void *p);
#define TCM_MALLOC_SLOW malloc_missed
#define TCM_FREE_SLOW free_missed
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
static bool fork_shares;            /* TCM_MALLOC_FORK=shared */
static bool heap_is_parents;        /* a child of a fork: the heap is its private snapshot */
static _Atomic bool said_full;

/* fork. The heap is shared memory, so a child that went on using it would
 * free and overwrite its parent's objects (bash crashes at its first
 * pipeline). Unless TCM_MALLOC_FORK=shared, the child makes the heap and
 * the metadata at their addresses a private copy of what they held at the
 * fork (what copy-on-write would have given it), allocates from the
 * system malloc from then on and frees nothing in the snapshot; the parent
 * waits (at most FORK_WAIT_NS) until the copy is made, so that what the
 * child sees is the heap at the fork. With TCM_MALLOC_FORK=shared the
 * child attaches as a new client and shares the objects (libtcm's own
 * behaviour). */
#define FORK_WAIT_NS 10000000000ll
static _Atomic uint32_t *fork_words; /* [0]: forks asked for, [1]: snapshots made (shared with children) */
static void before_fork(void);
static void parent_after_fork(void);
static void child_after_fork(void);

TCM_COLD static void read_settings_once(void)
{
    const char *f = getenv("TCM_MALLOC_FALLBACK");
    fallback = !(f && strcmp(f, "0") == 0);
    const char *k = getenv("TCM_MALLOC_FORK");
    fork_shares = k && strcmp(k, "shared") == 0;
    fork_words = tcm__shared_anon(64);
    tcm__attach_failed_note =
        fallback ? "; going on with the system malloc" : "; allocations fail (TCM_MALLOC_FALLBACK=0)";
    tcm__at_fork(before_fork, parent_after_fork, child_after_fork);
}
static TCM_TLS uint32_t fork_gen; /* the forking thread's (and its child's copy of it) */
static TCM_TLS bool fork_snapshots;

TCM_COLD static void before_fork(void)
{
    fork_snapshots = !fork_shares && fork_words && atomic_load(&tcm__proc.attached) &&
                     atomic_load(&mode) == USE_TCM;
    if (fork_snapshots)
        fork_gen = atomic_fetch_add(&fork_words[0], 1) + 1;
}

TCM_COLD static void parent_after_fork(void)
{
    if (!fork_snapshots)
        return;
    uint64_t start = tcm__now_ns();
    uint32_t got;
    while ((int32_t)((got = atomic_load(&fork_words[1])) - fork_gen) < 0 &&
           tcm__now_ns() - start < (uint64_t)FORK_WAIT_NS)
        tcm__wait(&fork_words[1], got, 100000000);
}

TCM_COLD static void child_after_fork(void)
{
    if (!fork_snapshots)
        return;
    tcm_proc_t *pr = &tcm__proc;
    atomic_store(&mode, USE_SYSTEM);
    heap_is_parents = true;
    /* allocates nothing: the system malloc may not be usable yet here
     * (its own fork handler may run after this one) */
    int err = tcm__privatize(pr->heap, pr->heap_size, TCM_PAGE_SHIFT, atomic_load(&tcm__page_class),
                             TCM_PAGE_CLASS_FREE);
    if (!err)
        err = tcm__privatize((void *)pr->meta, pr->meta_size, 0, NULL, 0);
    atomic_store(&fork_words[1], fork_gen);
    tcm__wake(&fork_words[1], 1);
    if (err) {
        fprintf(stderr, "tcm-malloc: fork: cannot make the child's copy of the heap: %s\n", strerror(-err));
        _Exit(127);
    }
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

/* tcm could not serve: without tcmd (never attached, or lost for good) the
 * rest of the process uses the system malloc; a full heap only this once. */
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
        fprintf(stderr, "tcm-malloc: the shared heap is full: allocations it refuses come from the system "
                        "malloc\n");
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

/* tcm's slow paths, with the library's own allocations sent elsewhere */
TCM_NOINLINE static void *tcm_slow(size_t size, size_t align)
{
    read_settings();
    tcm__in_library++;
    void *p = align > 16 ? tcm_aligned_alloc(align, size) : tcm__malloc_slow(size);
    tcm__in_library--;
    return p ? p : after_refusal(size, align);
}

/* a forwarder, inlined as the jump to tcm_slow */
static void *malloc_missed(size_t size)
{
    return tcm_slow(size, 0);
}

/* A free the hot path did not take: a heap object whose bin is full, or a
 * pointer that is not the heap's (the hot path's one range check routes
 * both here). A fork child's thread has no cache, so every free of its
 * snapshot comes here too. */
TCM_NOINLINE static void free_missed(void *p)
{
    if (in_heap(p)) {
        if (heap_is_parents)
            return; /* the snapshot's: nothing to give back */
        tcm__in_library++;
        tcm__free_slow(p); /* a misaligned one: tcm's "invalid pointer" */
        tcm__in_library--;
        return;
    }
    if (!p || in_boot(p))
        return;
    resolve();
    sys_free(p);
}

/* ---- the malloc family */

TCM_EXPORT void *malloc(size_t size)
{
    if (tcm_likely(served_by_tcm()))
        return tcm__malloc_fast(size);
    return system_alloc(size, 0);
}

TCM_EXPORT void free(void *p)
{
    tcm__free_fast(p);
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
    void *p = malloc(total);
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

TCM_EXPORT void *realloc(void *p, size_t size)
{
    if (!p)
        return malloc(size);
    if (size == 0) {
        free(p);
        return NULL;
    }
    if (!in_heap(p) && !in_boot(p)) { /* the system's stays the system's */
        resolve();
        return sys_realloc(p, size);
    }
    size_t old = usable(p);
    if (in_heap(p) && tcm__realloc_keeps(old, size))
        return p;
    void *q = malloc(size);
    if (!q)
        return NULL;
    memcpy(q, p, old < size ? old : size);
    free(p);
    return q;
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

static void *aligned(size_t align, size_t size)
{
    if (align <= 16)
        return malloc(size);
    if (!served_by_tcm())
        return system_alloc(size, align);
    return tcm_slow(size, align);
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
