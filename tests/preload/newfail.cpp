// newfail.cpp — operator new when memory runs out, run with and without the
// LD_PRELOAD drop-in (tests/preload_test.sh compares the output; under the
// drop-in with TCM_MALLOC_FALLBACK=0, so that tcm itself says no): new
// throws std::bad_alloc, nothrow new returns nullptr, the new_handler is
// called until it gives up, an exception of the handler's own goes through
// new to the caller, and nothrow new turns a handler's bad_alloc into
// nullptr.
#include <cstddef>
#include <iostream>
#include <new>

static const std::size_t too_much = std::size_t(1) << 44;
static int calls;

static void give_up_third() { if (++calls == 3) std::set_new_handler(nullptr); }
struct Mine {};
static void throw_mine() { ++calls; throw Mine{}; }
static void throw_bad() { ++calls; throw std::bad_alloc(); }

int main() {
    try { char *p = new char[too_much]; std::cout << "allocated " << (void *)p << "\n"; }
    catch (const std::bad_alloc &) { std::cout << "new: bad_alloc\n"; }
    try { char *p = new (std::align_val_t(64)) char[too_much]; std::cout << "allocated " << (void *)p << "\n"; }
    catch (const std::bad_alloc &) { std::cout << "aligned new: bad_alloc\n"; }
    std::cout << "nothrow new: " << (new (std::nothrow) char[too_much] == nullptr ? "nullptr" : "memory") << "\n";
    std::set_new_handler(give_up_third);
    try { (void)new char[too_much]; } catch (const std::bad_alloc &) { std::cout << "handler called " << calls << " times, then bad_alloc\n"; }
    calls = 0;
    std::set_new_handler(throw_mine);
    try { (void)::operator new(too_much); } catch (const Mine &) { std::cout << "the handler's own exception, after " << calls << " call\n"; }
    calls = 0;
    std::set_new_handler(throw_bad);
    void *q = ::operator new(too_much, std::nothrow);
    std::cout << "nothrow new, handler throws: " << (q ? "memory" : "nullptr") << " after " << calls << " call\n";
    q = ::operator new(too_much, std::align_val_t(128), std::nothrow);
    std::cout << "aligned nothrow new, handler throws: " << (q ? "memory" : "nullptr") << " after " << calls << " calls\n";
    std::set_new_handler(nullptr);
    int *ok = new int(7);
    std::cout << "then new int: " << *ok << "\n";
    delete ok;
}
