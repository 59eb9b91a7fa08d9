/* tcm.hpp — tcm::allocator<T>: standard containers whose memory is the
 * shared tcm heap, so that another process attached to the same tcmd
 * (fork child or not, another program even) can read and change them.
 *
 *   using shm_vector = std::vector<tcm::string, tcm::allocator<tcm::string>>;
 *   auto *v = tcm::make<shm_vector>();          // the container itself in the heap too
 *   tcm_root_set("names", v);                   // another process: tcm_root_get("names")
 *
 * Every pointer in the heap is valid in every attached process (the heap
 * is mapped at one address everywhere), so the containers' own pointers
 * need no translation. What the processes must share besides: the
 * container's layout (the same standard library; a type with virtual
 * functions only between processes of one binary, whose vtables are at the
 * same address), stateless hashers and comparers, and their own locking
 * (a process-shared mutex in the heap; README, "C++ containers").
 * An allocation the heap refuses throws std::bad_alloc. */
#ifndef TCM_HPP
#define TCM_HPP

#include <cstddef>
#include <functional>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "tcm.h"

namespace tcm {

template <class T> struct allocator {
    using value_type = T;
    /* stateless: any two compare equal, so containers move and swap freely */
    using is_always_equal = std::true_type;
    using propagate_on_container_move_assignment = std::true_type;

    allocator() noexcept = default;
    template <class U> allocator(const allocator<U> &) noexcept {}

    T *allocate(std::size_t n)
    {
        if (n > static_cast<std::size_t>(-1) / sizeof(T))
            throw std::bad_array_new_length();
        void *p = alignof(T) > 16 ? tcm_aligned_alloc(alignof(T), n * sizeof(T)) : tcm_malloc(n * sizeof(T));
        if (!p)
            throw std::bad_alloc();
        return static_cast<T *>(p);
    }
    void deallocate(T *p, std::size_t n) noexcept
    {
        if (alignof(T) > 16)
            tcm_free(p);
        else
            tcm_free_sized(p, n * sizeof(T));
    }
};

template <class T, class U> bool operator==(const allocator<T> &, const allocator<U> &) noexcept { return true; }
template <class T, class U> bool operator!=(const allocator<T> &, const allocator<U> &) noexcept { return false; }

/* A string in the heap, and a hasher for it (std::hash knows only the
 * std::allocator one): the same value as std::hash<std::string_view>. */
using string = std::basic_string<char, std::char_traits<char>, allocator<char>>;
struct string_hash {
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

/* An object constructed in the heap (a container's own struct, say), and
 * its end: destroyed and freed, by any process. */
template <class T, class... Args> T *make(Args &&...args)
{
    void *p = alignof(T) > 16 ? tcm_aligned_alloc(alignof(T), sizeof(T)) : tcm_malloc(sizeof(T));
    if (!p)
        throw std::bad_alloc();
    try {
        return new (p) T(std::forward<Args>(args)...);
    } catch (...) {
        tcm_free(p);
        throw;
    }
}

template <class T> void destroy(T *p) noexcept
{
    if (!p)
        return;
    p->~T();
    tcm_free(p);
}

} // namespace tcm

#endif
