/* heap.h — where tcm-kv's table takes its memory from (plain C, so that
 * the Boost heap, in C++, can fill one in). */
#ifndef KV_HEAP_H
#define KV_HEAP_H

#include <stdbool.h>
#include <stddef.h>

/* Where the table's memory comes from: tcm's heap, or another one. */
typedef struct kv_heap {
    const char *name;
    int (*attach)(const char *where); /* 0 or -errno; again in each worker process */
    void (*detach)(void);
    void *(*alloc)(size_t size);
    void (*release)(void *p);
    size_t (*usable)(const void *p);
    void *(*root_get)(const char *name);
    int (*root_set)(const char *name, void *p);
    bool shared; /* its memory is shared by processes (else: --threads only) */
} kv_heap_t;

#endif
