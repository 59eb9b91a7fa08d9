/* large.c — large allocations: 200 000 allocations of 64 KiB to 4 MiB with
 * 16 live at a time, each touched at both ends. */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    enum { OPS = 200000, LIVE = 16 };
    void *live[LIVE] = {0};
    unsigned s = 1;
    for (int i = 0; i < OPS; i++) {
        s = s * 1103515245u + 12345u;
        size_t n = (64u << 10) + (s >> 4) % (4u << 20);
        int k = (int)((s >> 16) % LIVE);
        free(live[k]);
        char *p = malloc(n);
        p[0] = 1;
        p[n - 1] = 2;
        live[k] = p;
    }
    for (int k = 0; k < LIVE; k++)
        free(live[k]);
    puts("large done");
    return 0;
}
