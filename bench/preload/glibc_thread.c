/* glibc_thread.c — glibc's bench-malloc-thread as mimalloc-bench runs it,
 * with a fixed amount of work instead of a fixed time: each of 4 threads
 * keeps 1 024 blocks and replaces a random one 4 000 000 times, sizes drawn
 * from glibc's distribution of small requests (most under 128 bytes, a
 * tail up to 4 KiB). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { THREADS = 4, BLOCKS = 1024, ITERATIONS = 4000000 };

static size_t size_of(uint64_t r)
{
    unsigned k = (unsigned)(r % 100);
    if (k < 60)
        return 8 + (r >> 8) % 56;     /* 8-63 */
    if (k < 90)
        return 64 + (r >> 8) % 192;   /* 64-255 */
    return 256 + (r >> 8) % 3840;     /* 256-4095 */
}

static void *worker(void *arg)
{
    uint64_t r = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    void *blocks[BLOCKS] = {0};
    for (int i = 0; i < ITERATIONS; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        unsigned k = (unsigned)(r >> 54) % BLOCKS;
        free(blocks[k]);
        size_t n = size_of(r >> 20);
        char *p = malloc(n);
        if (!p)
            abort();
        p[0] = p[n - 1] = 1;
        blocks[k] = p;
    }
    for (int k = 0; k < BLOCKS; k++)
        free(blocks[k]);
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    puts("glibc_thread done");
    return 0;
}
