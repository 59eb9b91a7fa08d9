// heap_boost.cpp — Boost.Interprocess managed_shared_memory behind
// kv_peer_heap_t, for bench/run_kv.sh: the same tcm-kv (tcm-kv-peers,
// KV_HEAP=boost) with its table and values in the mutex-guarded
// shared-memory allocator that tcm's users replace.
// The master creates the segment (KV_BOOST_SIZE: a size as tcm-kv reads
// one, size.h; 4G by default) and unlinks its name at once; the workers it
// forks inherit the mapping at the same address, so the table's raw
// pointers hold in all of them.
#include <boost/interprocess/managed_shared_memory.hpp>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <unistd.h>

extern "C" {
#include "peers.h"
#include "size.h"
}

namespace bi = boost::interprocess;

namespace {

bi::managed_shared_memory *segment;

struct header { // the requested size, for usable(): Boost does not say
    size_t size;
    size_t pad;
};

int attach(const char *) {
    if (segment)
        return 0; // a worker: inherited from the master
    const char *env = std::getenv("KV_BOOST_SIZE");
    uint64_t size = 4ull << 30;
    if (env && kv_parse_size(env, &size) != 0) {
        std::fprintf(stderr, "tcm-kv: KV_BOOST_SIZE=%s is not a size\n", env);
        return -22;
    }
    std::string name = "tcm-kv-boost-" + std::to_string(getpid());
    try {
        segment = new bi::managed_shared_memory(bi::create_only, name.c_str(), size);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tcm-kv: boost segment: %s\n", e.what());
        return -12;
    }
    bi::shared_memory_object::remove(name.c_str());
    return 0;
}

void *alloc(size_t n) {
    auto *h = static_cast<header *>(segment->allocate(sizeof(header) + n, std::nothrow));
    if (!h)
        return nullptr;
    h->size = n;
    return h + 1;
}

void release(void *p) {
    if (p)
        segment->deallocate(static_cast<header *>(p) - 1);
}

size_t usable(const void *p) {
    return (static_cast<const header *>(p) - 1)->size;
}

void *root_get(const char *name) {
    auto found = segment->find<void *>(name);
    return found.first ? *found.first : nullptr;
}

int root_set(const char *name, void *p) {
    try {
        *segment->find_or_construct<void *>(name)() = p;
    } catch (const std::exception &) {
        return -12;
    }
    return 0;
}

} // namespace

extern "C" const kv_peer_heap_t kv_boost_heap = {"boost", attach, alloc, release, usable, root_get, root_set, true};
