// preload_new.cpp — C++'s operator new and delete, every form, on
// libtcm-malloc.so's malloc: new throws std::bad_alloc (after the
// new_handler had its chances), nothrow returns nullptr, sized and aligned
// deletes free by address like free().
#include <cstdlib>
#include <new>

#include "preload.h"

#define TCM_EXPORT __attribute__((visibility("default")))

namespace {

void *allocate(std::size_t size, std::size_t align, bool nothrow)
{
    if (size == 0)
        size = 1;
    for (;;) {
        void *p = align > 16 ? tcm__preload_aligned(align, size) : std::malloc(size);
        if (p)
            return p;
        std::new_handler h = std::get_new_handler();
        if (!h) {
            if (nothrow)
                return nullptr;
            throw std::bad_alloc();
        }
        if (nothrow) {
            try {
                h();
            } catch (...) {
                return nullptr;
            }
        } else {
            h();
        }
    }
}

} // namespace

TCM_EXPORT void *operator new(std::size_t n) { return allocate(n, 0, false); }
TCM_EXPORT void *operator new[](std::size_t n) { return allocate(n, 0, false); }
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

TCM_EXPORT void operator delete(void *p) noexcept { std::free(p); }
TCM_EXPORT void operator delete[](void *p) noexcept { std::free(p); }
TCM_EXPORT void operator delete(void *p, std::size_t) noexcept { std::free(p); }
TCM_EXPORT void operator delete[](void *p, std::size_t) noexcept { std::free(p); }
TCM_EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept { std::free(p); }
TCM_EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept { std::free(p); }
TCM_EXPORT void operator delete(void *p, std::align_val_t) noexcept { std::free(p); }
TCM_EXPORT void operator delete[](void *p, std::align_val_t) noexcept { std::free(p); }
TCM_EXPORT void operator delete(void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
TCM_EXPORT void operator delete[](void *p, std::size_t, std::align_val_t) noexcept { std::free(p); }
TCM_EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept { std::free(p); }
TCM_EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept { std::free(p); }
