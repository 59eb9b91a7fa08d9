/* realloc_grow.c — buffers that grow by realloc a few bytes at a time, as
 * redis's listpacks, string builders and vectors do: 1 000 buffers, each
 * appended to in turn, 3-8 bytes a step, up to 8 000 bytes. Every buffer
 * passes through each size class on its way, so what an allocator keeps
 * of a class the buffers have left behind is memory the program no longer
 * uses (docs/BENCHMARKS.md, "Real programs under the drop-in"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BUFFERS = 1000, STEPS = 1200, LIMIT = 8000 };

int main(void)
{
    static char *buf[BUFFERS];
    static size_t len[BUFFERS];
    unsigned r = 1;
    for (int step = 0; step < STEPS; step++)
        for (int i = 0; i < BUFFERS; i++) {
            r = r * 1103515245u + 12345u;
            size_t add = 3 + (r >> 16) % 6;
            if (len[i] + add > LIMIT)
                continue;
            char *p = realloc(buf[i], len[i] + add + 1);
            if (!p)
                abort();
            memset(p + len[i], 'x', add + 1);
            buf[i] = p;
            len[i] += add;
        }
    size_t total = 0;
    for (int i = 0; i < BUFFERS; i++)
        total += len[i];
    printf("realloc_grow done: %zu bytes\n", total);
    return 0;
}
