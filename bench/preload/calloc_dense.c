/* calloc_dense.c — a buffer calloc'd and filled, then freed, over and
 * over (a decoder's frame, a per-request arena): 64 rounds of 16 MiB, a
 * byte in every 64 written. Where calloc_sparse's tables are better given
 * back to the kernel than cleared, these are better cleared: a page given
 * back costs a fault when written again. */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    enum { ROUNDS = 64 };
    const size_t bytes = 16u << 20;
    unsigned long sum = 0;
    for (int r = 0; r < ROUNDS; r++) {
        unsigned char *t = calloc(1, bytes);
        if (!t)
            return 1;
        for (size_t o = 0; o < bytes; o += 64)
            sum += t[o]++; /* 0: each round's buffer starts zero */
        free(t);
    }
    printf("%lu\n", sum);
    return sum != 0;
}
