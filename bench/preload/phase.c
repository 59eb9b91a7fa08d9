/* phase.c — a phase change: 1 GiB of 4 MiB blocks, touched and freed, then
 * 1 GiB of 64-byte objects, touched and freed. Its peak RSS says whether
 * the memory of the first phase serves the second (or is given back before
 * it): an allocator that never gives large runs back and cannot cut small
 * objects from them holds 2 GiB. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    enum { BLOCKS = 256 };
    const size_t block = 4u << 20, small = 64, nsmall = (1u << 30) / 64;
    char **big = malloc(BLOCKS * sizeof *big);
    for (int i = 0; i < BLOCKS; i++) {
        big[i] = malloc(block);
        if (!big[i])
            return 1;
        memset(big[i], 1, block);
    }
    for (int i = 0; i < BLOCKS; i++)
        free(big[i]);
    free(big);
    char **obj = malloc(nsmall * sizeof *obj);
    if (!obj)
        return 1;
    for (size_t i = 0; i < nsmall; i++) {
        obj[i] = malloc(small);
        if (!obj[i])
            return 1;
        obj[i][0] = (char)i;
        obj[i][small - 1] = (char)i;
    }
    for (size_t i = 0; i < nsmall; i++)
        free(obj[i]);
    free(obj);
    puts("phase done");
    return 0;
}
