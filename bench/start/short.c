/* short.c — a program a script runs: it allocates and frees one block of
 * each of 64 sizes (8 B to 512 B) and exits. What an allocator costs it is
 * its own start: loading, laying out its heap, threads it starts. */
#include <stdlib.h>

int main(void)
{
    void *p[64];
    for (int i = 0; i < 64; i++)
        p[i] = malloc(8 + (size_t)i * 8);
    for (int i = 0; i < 64; i++)
        free(p[i]);
    return 0;
}
