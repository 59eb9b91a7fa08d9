/* peers.h — the other heaps tcm-kv-peers puts behind tcm.h's calls, for
 * bench/kv_bench.py: the same server on the system malloc (glibc, or
 * jemalloc by LD_PRELOAD; --threads only) or on Boost.Interprocess
 * managed_shared_memory (heap_boost.cpp, where the build has Boost).
 * Plain C, so that the Boost heap, in C++, can fill one in. */
#ifndef KV_PEERS_H
#define KV_PEERS_H

#include <stdbool.h>
#include <stddef.h>

typedef struct kv_peer_heap {
    const char *name;
    int (*attach)(const char *where); /* 0 or -errno; again in each worker process */
    void *(*alloc)(size_t size);
    void (*release)(void *p);
    size_t (*usable)(const void *p);
    void *(*root_get)(const char *name);
    int (*root_set)(const char *name, void *p);
    bool shared; /* its memory is shared by processes (else: --threads only) */
} kv_peer_heap_t;

#endif
