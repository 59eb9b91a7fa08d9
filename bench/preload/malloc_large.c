/* malloc_large.c — mimalloc-bench's malloc-large in C: 20 buffers, each
 * iteration replaces a random one with a new block of 5 to 25 MiB, zeroed
 * (std::make_unique<char[]> value-initializes), allocated before the old
 * one is freed; 2 000 iterations. A program that reuses large blocks: an
 * allocator that gives them back at once pays their page faults again. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* through a pointer the compiler cannot see through: malloc + memset(0)
 * would otherwise become calloc, which an allocator may serve with fresh
 * zero pages it never touches (C++'s new char[n]() is not folded so) */
static void *(*volatile zero)(void *, int, size_t) = memset;

int main(void)
{
    enum { BUFFERS = 20, ITERATIONS = 2000 };
    const size_t min = 5u << 20, max = 25u << 20;
    char *buf[BUFFERS] = {0};
    uint64_t s = 42;
    for (int i = 0; i < ITERATIONS; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)((s >> 33) % BUFFERS);
        size_t n = min + (size_t)((s >> 11) % (max - min + 1));
        char *p = malloc(n);
        if (!p)
            return 1;
        zero(p, 0, n);
        free(buf[k]);
        buf[k] = p;
    }
    for (int k = 0; k < BUFFERS; k++)
        free(buf[k]);
    puts("malloc_large done");
    return 0;
}
