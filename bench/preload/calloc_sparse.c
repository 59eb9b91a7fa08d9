/* calloc_sparse.c — tables calloc'd large and used sparsely, as hash
 * tables, bitmaps and sparse arrays often are: each round callocs 16
 * tables of 16 MiB, writes a byte in every 64th page of each and frees
 * them; 16 rounds. The first round's pages are fresh, the others' are
 * what the first freed, written at a page in 64: an allocator that clears
 * a table by writing it maps 256 MiB the program never uses. */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    enum { ROUNDS = 16, TABLES = 16, STRIDE = 64 * 4096 };
    const size_t bytes = 16u << 20;
    unsigned char *t[TABLES];
    unsigned long sum = 0;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < TABLES; i++) {
            if (!(t[i] = calloc(1, bytes)))
                return 1;
            for (size_t o = (size_t)(r % 64) * 4096; o < bytes; o += STRIDE)
                sum += t[i][o]++; /* 0: each round's tables start zero */
        }
        for (int i = 0; i < TABLES; i++)
            free(t[i]);
    }
    printf("%lu\n", sum);
    return sum != 0;
}
