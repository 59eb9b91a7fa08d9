/* peers.c — tcm-kv-peers: the calls tcm-kv makes to tcm (tcm.h), answered
 * by another heap, so that bench/ can run the very same server on it. The
 * heap is named by $KV_HEAP: "libc" (the system malloc, or whatever
 * LD_PRELOAD puts there; workers must be threads, --threads) or "boost"
 * (heap_boost.cpp, where the build has Boost). This file is linked instead
 * of libtcm; the reference server, tcm-kv, never sees it. */
#define _GNU_SOURCE
#include "peers.h"

#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tcm.h>

/* The system malloc: one process, so one root is enough. */
static void *libc_root;

static int libc_attach(const char *where)
{
    (void)where;
    return 0;
}

static size_t libc_usable(const void *p)
{
    return malloc_usable_size((void *)p);
}

static void *libc_root_get(const char *name)
{
    (void)name;
    return libc_root;
}

static int libc_root_set(const char *name, void *p)
{
    (void)name;
    libc_root = p;
    return 0;
}

static const kv_peer_heap_t libc_heap = {"libc", libc_attach, malloc, free, libc_usable,
                                         libc_root_get, libc_root_set, false};

#ifdef KV_WITH_BOOST
extern const kv_peer_heap_t kv_boost_heap;
#endif

static const kv_peer_heap_t *heap;
static pid_t attached_pid;

static const kv_peer_heap_t *heap_named(const char *name)
{
    if (name && !strcmp(name, "libc"))
        return &libc_heap;
#ifdef KV_WITH_BOOST
    if (name && !strcmp(name, "boost"))
        return &kv_boost_heap;
#endif
    return NULL;
}

int tcm_init(const char *socket_path)
{
    if (!heap && !(heap = heap_named(getenv("KV_HEAP")))) {
        fprintf(stderr, "tcm-kv-peers: KV_HEAP=%s is not a heap of this build (libc%s)\n",
                getenv("KV_HEAP") ? getenv("KV_HEAP") : "", heap_named("boost") ? ", boost" : "");
        return -EINVAL;
    }
    if (attached_pid && attached_pid != getpid() && !heap->shared) { /* a forked worker */
        fprintf(stderr, "tcm-kv-peers: the %s heap is not shared between processes: use --threads\n", heap->name);
        kill(getppid(), SIGTERM); /* the master stops the others instead of restarting this one */
        return -EINVAL;
    }
    attached_pid = getpid();
    return heap->attach(socket_path);
}

void tcm_shutdown(void)
{
}

void *tcm_malloc(size_t size)
{
    return heap->alloc(size);
}

void tcm_free(void *p)
{
    heap->release(p);
}

size_t tcm_usable_size(const void *p)
{
    return heap->usable(p);
}

void *tcm_root_get(const char *name)
{
    return heap->root_get(name);
}

int tcm_root_set(const char *name, void *p)
{
    return heap->root_set(name, p);
}

int tcm_stat(const char *name, uint64_t *value)
{
    (void)name;
    (void)value;
    return -ENOSYS; /* INFO then shows no tcm figures */
}
