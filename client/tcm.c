/* tcm.c — the public API. malloc and free are the inlined hot path of
 * tcache_inl.h; the rest builds on them. */
#include <errno.h>
#include <string.h>

#ifndef EDQUOT /* (MinGW's errno.h has no disk quotas) */
#define EDQUOT 122
#endif

#include "background.h"
#include "channel.h"
#include "ctlsock.h"
#include "frame.h"
#include "client.h"
#include "diag.h"
#include "given.h"
#include "lifecycle.h"
#include "tcache.h"
#include "tcache_inl.h"
#include "tcm.h"

/* The hit paths each start a cache line, wherever the rest of the library
 * puts them: their placement stays the same from build to build. */
#define TCM_HOT __attribute__((aligned(TCM_CACHELINE)))

TCM_HOT void *tcm_malloc(size_t size)
{
    return tcm__malloc_fast(size);
}

TCM_HOT void tcm_free(void *p)
{
    tcm__free_fast(p);
}

void tcm_free_sized(void *p, size_t size)
{
    (void)size; /* the page map knows the class; the size is only a hint */
    tcm__free_fast(p);
}

void *tcm_calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (total > TCM_MAX_SMALL)
        return tcm__calloc_large(total);
    void *p = tcm__malloc_fast(total);
    if (p)
        memset(p, 0, total);
    return p;
}

static bool heap_offset(const void *p, uint64_t *off)
{
    *off = (uintptr_t)p - atomic_load_explicit(&tcm__heap_base, memory_order_relaxed);
    return *off < atomic_load_explicit(&tcm__heap_bytes, memory_order_relaxed);
}

size_t tcm_usable_size(const void *p)
{
    uint64_t off;
    if (!p || !heap_offset(p, &off))
        return 0;
    uint32_t page = (uint32_t)(off >> TCM_PAGE_SHIFT);
    unsigned pc = atomic_load_explicit(&tcm__page_class, memory_order_relaxed)[page], cls = tcm__page_small_class(pc);
    if (pc == TCM_PAGE_CLASS_FREE)
        return 0;
    if (cls)
        return tcm__proc.classes[cls].size;
    if (pc != TCM_PAGE_CLASS_LARGE)
        tcm__fatal_page_class("tcm_usable_size()", p, pc);
    const tcm_span_t *sp = &tcm__proc.spans[tcm__proc.page_span[page]];
    return (size_t)sp->npages << TCM_PAGE_SHIFT;
}

TCM_NOINLINE static void *realloc_move(void *p, size_t size, size_t old)
{
    return tcm__realloc_move(p, size, old);
}

TCM_NOINLINE static void *realloc_slow(void *p, size_t size)
{
    if (!p)
        return tcm__malloc_fast(size);
    if (size == 0) {
        tcm__free_fast(p);
        return NULL;
    }
    size_t old = tcm_usable_size(p);
    if (old == 0)
        tcm__fatal("tcm_realloc(): invalid pointer %p", p);
    if (tcm__realloc_keeps(old, size))
        return p;
    return realloc_move(p, size, old);
}

/* a small block that keeps its class returns before anything is saved */
void *tcm_realloc(void *p, size_t size)
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

void *tcm_aligned_alloc(size_t alignment, size_t size)
{
    if (alignment == 0 || (alignment & (alignment - 1))) {
        errno = EINVAL;
        return NULL;
    }
    if (alignment <= TCM_ALIGN)
        return tcm__malloc_fast(size);
    size_t cs = tcm__aligned_class(alignment, size);
    return cs ? tcm__malloc_fast(cs) : tcm__large_alloc(size ? size : 1, alignment);
}

uint64_t tcm_to_offset(const void *p)
{
    uint64_t off;
    if (!p)
        return 0;
    if (!heap_offset(p, &off) && (tcm__ensure_attached() != 0 || !heap_offset(p, &off)))
        return UINT64_MAX;
    return off;
}

void *tcm_from_offset(uint64_t off)
{
    if (off == 0 || tcm__ensure_attached() != 0 || off >= tcm__proc.heap_size)
        return NULL;
    tcm__tsan_from_elsewhere();
    return tcm__proc.heap + off;
}

/* One ROOT_SET round trip: p to name in mode, if it held expected (REPLACE). */
static int root_call(const char *name, void *p, uint32_t mode, void *expected)
{
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len >= TCM_ROOT_NAME_MAX)
        return -EINVAL;
    int err = tcm__ensure_attached();
    if (err)
        return err;
    uint64_t off = UINT64_MAX, want = UINT64_MAX;
    if ((p && !heap_offset(p, &off)) || (expected && !heap_offset(expected, &want)))
        return -EINVAL;
    uint32_t idx;
    tcm_slot_t *slot = tcm__slot_acquire(&idx);
    slot->op = TCM_OP_ROOT_SET;
    slot->cls = mode;
    slot->arg = off;
    slot->arg2 = want;
    memset(slot->offs, 0, TCM_ROOT_NAME_MAX);
    memcpy(slot->offs, name, len);
    int st = tcm__call(slot, idx);
    tcm__slot_release(slot);
    switch (st) {
    case TCM_ST_OK: return 0;
    case TCM_ST_NO_ROOM: return -ENOSPC;
    case TCM_ST_EXISTS: return -EEXIST;
    case TCM_ST_CHANGED: return -EAGAIN;
    case TCM_ST_ROOT_SHARE: return -EDQUOT;
    case TCM_ST_NOT_HOLDER: return -EPERM;
    case TCM_ST_NOMEM: return -ENOTCONN;
    default: return -EINVAL;
    }
}

int tcm_root_set(const char *name, void *p)
{
    return root_call(name, p, TCM_ROOT_SET, NULL);
}

int tcm_root_create(const char *name, void *p)
{
    return p ? root_call(name, p, TCM_ROOT_CREATE, NULL) : -EINVAL;
}

int tcm_root_replace(const char *name, void *expected, void *desired)
{
    return root_call(name, desired, TCM_ROOT_REPLACE, expected);
}

void *tcm_root_get(const char *name)
{
    if (!name || !*name || strlen(name) >= TCM_ROOT_NAME_MAX || tcm__ensure_attached() != 0)
        return NULL;
    uint64_t off;
    if (tcm__root_find(tcm__proc.roots, tcm__proc.meta->nroots, name, &off) < 0)
        return NULL;
    return off < tcm__proc.heap_size ? tcm__proc.heap + off : NULL;
}

#define STAT_WAIT_MS 5000

/* A figure tcmd computes when asked (tcmctl stats): one round trip. */
TCM_COLD static int stat_from_daemon(const char *name, uint64_t *value)
{
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__StatsRequest sr = TCM__STATS_REQUEST__INIT;
    req.body_case = TCM__REQUEST__BODY_STATS;
    req.stats = &sr;
    tcm__library_enter(); /* (the drop-in: what protobuf-c allocates is the system's) */
    /* one asker at a time, and no reconnect swapping the socket meanwhile
     * (attach_lock before conn_lock, as fork.c takes them) */
    pthread_mutex_lock(&tcm__proc.attach_lock);
    pthread_mutex_lock(&tcm__proc.conn_lock);
    Tcm__Response *resp = tcm__ctlsock_ask(&req, STAT_WAIT_MS);
    pthread_mutex_unlock(&tcm__proc.conn_lock);
    pthread_mutex_unlock(&tcm__proc.attach_lock);
    int rc = resp && resp->body_case == TCM__RESPONSE__BODY_STATS ? -ENOENT : -ENOTCONN;
    for (size_t i = 0; rc == -ENOENT && i < resp->stats->n_stat; i++) {
        const Tcm__Stat *s = resp->stats->stat[i];
        if (strcmp(s->name, name) != 0)
            continue;
        *value = s->is_float ? (uint64_t)(s->fvalue * 1000.0 + 0.5) : s->value; /* a ratio: in thousandths */
        rc = 0;
    }
    if (resp)
        tcm__response__free_unpacked(resp, NULL);
    tcm__library_leave();
    return rc;
}

int tcm_stat(const char *name, uint64_t *value)
{
    if (!name || !value)
        return -EINVAL;
    int err = tcm__ensure_attached();
    if (err)
        return err;
    if (tcm__proc.daemon_lost)
        return -ENOTCONN;
    const tcm_heap_stats_t *st = &tcm__proc.meta->stats;
    /* what tcmd keeps current in the metadata segment: read there (but
     * bytes_committed, which tcmd measures when asked) */
#define TCM_STAT_LOOKUP(field, kind, w, doc)                                                                 \
    if (strcmp(name, #field) == 0 && strcmp(name, "bytes_committed") != 0) {                                \
        *value = atomic_load_explicit(&st->field, memory_order_relaxed);                                     \
        return 0;                                                                                            \
    }
    TCM_HEAP_STATS(TCM_STAT_LOOKUP)
#undef TCM_STAT_LOOKUP
    return stat_from_daemon(name, value);
}

TCM_COLD void tcm_shutdown(void)
{
    tcm_proc_t *pr = &tcm__proc;
    pthread_mutex_lock(&pr->attach_lock);
    if (atomic_load(&pr->attached)) {
        tcm__bg_stop(); /* before the flush: it uses the transfer tier too */
        tcm__flush_all();
        tcm__detach_locked();
    }
    pthread_mutex_unlock(&pr->attach_lock);
}
