/* heaps.c — tcm's heap and the system malloc behind kv_heap_t. */
#define _GNU_SOURCE
#include "heaps.h"

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tcm.h"

static int tcm_attach(const char *socket)
{
    return tcm_init(socket);
}

static const kv_heap_t tcm_heap = {"tcm", tcm_attach, tcm_shutdown, tcm_malloc, tcm_free,
                                   tcm_usable_size, tcm_root_get, tcm_root_set, true};

/* The system malloc: one process, so one root is enough. */
static void *libc_root;

static int libc_attach(const char *where)
{
    (void)where;
    return 0;
}

static void libc_detach(void)
{
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

static const kv_heap_t libc_heap = {"libc", libc_attach, libc_detach, malloc, free,
                                    libc_usable, libc_root_get, libc_root_set, false};

#ifdef KV_WITH_BOOST
extern const kv_heap_t kv_boost_heap;
#endif

const kv_heap_t *kv_heap_named(const char *name)
{
    if (!strcmp(name, "tcm"))
        return &tcm_heap;
    if (!strcmp(name, "libc"))
        return &libc_heap;
#ifdef KV_WITH_BOOST
    if (!strcmp(name, "boost"))
        return &kv_boost_heap;
#endif
    return NULL;
}
