/* heaps.h — the heaps tcm-kv can keep its table in: tcm's, and for
 * comparison (bench/) the system malloc with --threads, or
 * Boost.Interprocess managed_shared_memory where the build has Boost. */
#ifndef KV_HEAPS_H
#define KV_HEAPS_H

#include "table.h"

const kv_heap_t *kv_heap_named(const char *name);

#endif
