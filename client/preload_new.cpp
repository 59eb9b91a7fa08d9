// preload_new.cpp — C++'s operator new and delete, every form, on
// libtcm-malloc.so's malloc: new throws std::bad_alloc (after the
// new_handler had its chances), nothrow returns nullptr, sized and aligned
// deletes free by address like free().
//
// Without the C++ runtime: the drop-in is preloaded into every program, C
// ones included, and linking libstdc++ (and libgcc_s, libm with it) cost
// each of them ~1.2 MB of RSS and the time to load it. Built with
// -fno-exceptions and linked as C; what only the runtime can do (read the
// new_handler, throw, catch what a handler throws) is the runtime's own
// functions, looked up when an allocation first fails: a program that calls
// operator new has a C++ runtime loaded.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "preload.h"

#define TCM_EXPORT __attribute__((visibility("default")))

namespace {

typedef void (*handler_fn)();

handler_fn new_handler()
{
    auto get = reinterpret_cast<handler_fn (*)()>(tcm__cxx_runtime_symbol("_ZSt15get_new_handlerv"));
    return get ? get() : nullptr;
}

[[noreturn]] void throw_bad_alloc()
{
    auto thrower = reinterpret_cast<void (*)()>(tcm__cxx_runtime_symbol("_ZSt17__throw_bad_allocv"));
    if (thrower)
        thrower();
    fputs("tcm-malloc: out of memory in operator new, and no C++ runtime to throw std::bad_alloc\n", stderr);
    abort();
}

// The runtime's nothrow operator new, which calls the throwing one (this
// file's) and turns what it throws into nullptr: with a new_handler the
// handler may throw, and only the runtime can catch.
void *nothrow_by_runtime(std::size_t size, std::size_t align)
{
    void *f = tcm__cxx_runtime_symbol(align ? "_ZnwmSt11align_val_tRKSt9nothrow_t" : "_ZnwmRKSt9nothrow_t");
    if (!f)
        return nullptr;
    const std::nothrow_t tag{}; // std::nothrow itself is the runtime's
    if (align)
        return reinterpret_cast<void *(*)(std::size_t, std::align_val_t, const std::nothrow_t &)>(f)(
            size, std::align_val_t(align), tag);
    return reinterpret_cast<void *(*)(std::size_t, const std::nothrow_t &)>(f)(size, tag);
}

void *allocate(std::size_t size, std::size_t align, bool nothrow)
{
    if (size == 0)
        size = 1;
    for (;;) {
        void *p = align > 16 ? tcm__preload_aligned(align, size) : std::malloc(size);
        if (p)
            return p;
        handler_fn h = new_handler();
        if (!h) {
            if (nothrow)
                return nullptr;
            throw_bad_alloc();
        }
        if (nothrow)
            return nothrow_by_runtime(size, align > 16 ? align : 0);
        h();
    }
}

} // namespace

// new and new[]: malloc's hit, jumped to (preload.c); what it does not
// serve comes here
void *tcm__new_missed(std::size_t n) { return allocate(n, 0, false); }

TCM_EXPORT void *operator new(std::size_t n) { return tcm__preload_new(n); }
TCM_EXPORT void *operator new[](std::size_t n) { return tcm__preload_new(n); }
TCM_EXPORT void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return allocate(n, 0, true); }
TCM_EXPORT void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return allocate(n, 0, true); }
TCM_EXPORT void *operator new(std::size_t n, std::align_val_t a) { return allocate(n, (std::size_t)a, false); }
TCM_EXPORT void *operator new[](std::size_t n, std::align_val_t a) { return allocate(n, (std::size_t)a, false); }
TCM_EXPORT void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
    return allocate(n, (std::size_t)a, true);
}
TCM_EXPORT void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
    return allocate(n, (std::size_t)a, true);
}

TCM_EXPORT void operator delete(void *p) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete[](void *p) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete(void *p, std::size_t) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete[](void *p, std::size_t) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete(void *p, std::align_val_t) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete[](void *p, std::align_val_t) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete(void *p, std::size_t, std::align_val_t) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { tcm__preload_free(p); }
TCM_EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { tcm__preload_free(p); }
