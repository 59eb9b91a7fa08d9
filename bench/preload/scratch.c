/* scratch.c — cache-scratch (Hoard's passive false sharing test): the main
 * thread allocates one small object per thread and hands it over; each
 * thread frees it, then ROUNDS times allocates an object of the same size,
 * writes it WRITES times and frees it. An allocator that gives two threads
 * objects on one cache line makes them fight over it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { THREADS = 2, ROUNDS = 200000, WRITES = 2000, SIZE = 8 };

static void *body(void *arg)
{
    free(arg);
    for (int r = 0; r < ROUNDS; r++) {
        volatile char *p = malloc(SIZE);
        for (int w = 0; w < WRITES; w++)
            p[w % SIZE] = (char)(p[w % SIZE] + w);
        free((void *)p);
    }
    return NULL;
}

int main(void)
{
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, body, malloc(SIZE));
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    puts("scratch done");
    return 0;
}
