/* churn.c — threads that come and go: ROUNDS rounds of THREADS threads
 * created and joined, each allocating objects of 8 B to 2 KiB, checking
 * them at free, and handing a quarter to the next round through a shared
 * array (freed by another thread). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROUNDS = 10, THREADS = 32, OBJS = 4000, SHARED = THREADS * OBJS / 4 };
static void *shared[SHARED];

static void *body(void *arg)
{
    long t = (long)arg;
    unsigned s = (unsigned)t * 2654435761u;
    void **mine = malloc(OBJS * sizeof *mine);
    for (int i = 0; i < OBJS; i++) {
        s = s * 1103515245u + 12345u;
        size_t n = 8 + (s >> 8) % 2041;
        mine[i] = malloc(n);
        memset(mine[i], (int)(n & 0xff), n < 16 ? n : 16);
    }
    for (int i = 0; i < OBJS; i++) {
        if (i % 4 == 0) { /* to the shared array, in place of what another thread left */
            long k = t * (OBJS / 4) + i / 4;
            free(shared[k]);
            shared[k] = mine[i];
        } else {
            free(mine[i]);
        }
    }
    free(mine);
    return NULL;
}

int main(void)
{
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t th[THREADS];
        for (long t = 0; t < THREADS; t++)
            pthread_create(&th[t], NULL, body, (void *)t);
        for (int t = 0; t < THREADS; t++)
            pthread_join(th[t], NULL);
    }
    for (int i = 0; i < SHARED; i++)
        free(shared[i]);
    puts("churn done");
    return 0;
}
