/* cache_thrash.c — Hoard's cache-thrash as mimalloc-bench runs it: each of
 * 4 threads allocates an 8-byte object, writes it 1 000 times and frees it,
 * 200 000 times over. An allocator that hands two threads objects on one
 * cache line makes every write a cache miss in the other thread (active
 * false sharing). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { THREADS = 4, ITERATIONS = 200000, REPETITIONS = 1000, SIZE = 8 };

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < ITERATIONS; i++) {
        volatile char *p = malloc(SIZE);
        if (!p)
            abort();
        for (int r = 0; r < REPETITIONS; r++)
            for (int k = 0; k < SIZE; k++)
                p[k] = (char)(p[k] + 1);
        free((void *)p);
    }
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    puts("cache_thrash done");
    return 0;
}
