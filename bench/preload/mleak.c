/* mleak.c — a program that leaks as it goes (mimalloc-bench's mleak): 4
 * threads allocate 5 000 000 blocks of 16-1 024 bytes each and free all
 * but one in a thousand, so what stays grows slowly while the rest turns
 * over. An allocator must not let the leaked blocks pin the memory the
 * freed ones could reuse. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { THREADS = 4, ALLOCATIONS = 5000000, LIVE = 64 };

static void *worker(void *arg)
{
    uint64_t r = (uint64_t)(uintptr_t)arg;
    void *live[LIVE] = {0};
    for (int i = 0; i < ALLOCATIONS; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        unsigned k = (unsigned)(r >> 58) % LIVE;
        if (i % 1000 != 0) /* one in a thousand leaks */
            free(live[k]);
        size_t n = 16 + (size_t)(r >> 30) % 1009;
        char *p = malloc(n);
        if (!p)
            abort();
        p[0] = p[n - 1] = 1;
        live[k] = p;
    }
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    puts("mleak done");
    return 0;
}
