/* sysmalloc.c — libtcm-test-sysmalloc.so: a counting system malloc for
 * tests/preload_test.sh. Preloaded after libtcm-malloc.so, it is what the
 * drop-in finds as "the system malloc" (dlsym RTLD_NEXT), so its count is
 * what the drop-in sent there from the calling thread (the drop-in's
 * background thread allocates there too) of at most SMALL bytes. It
 * forwards to glibc's. */
#include <stddef.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void *__libc_memalign(size_t align, size_t size);

enum { SMALL = 1024 };

static _Thread_local unsigned long allocations;

void *malloc(size_t size)
{
    allocations += size <= SMALL;
    return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
    allocations += n <= SMALL && n * size <= SMALL;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
    allocations += size <= SMALL;
    return __libc_realloc(p, size);
}

void *memalign(size_t align, size_t size)
{
    allocations += size <= SMALL;
    return __libc_memalign(align, size);
}

unsigned long tt_system_allocations(void)
{
    return allocations;
}
