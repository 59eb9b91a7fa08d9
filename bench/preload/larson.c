/* larson.c — the larson server loop: THREADS threads, each with SLOTS
 * objects of 16 B to 1 KiB, replace a random slot's object OPS times, then
 * hand their slots to a new thread that goes on freeing them (a server
 * whose connections outlive the thread that served them), GENERATIONS
 * times over. */
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { THREADS = 2, GENERATIONS = 20, SLOTS = 1000, OPS = 1000000 };

typedef struct {
    void *slot[SLOTS];
    unsigned seed;
    int generation;
} state_t;

static sem_t chains_done;

static void *serve(void *arg)
{
    state_t *st = arg;
    unsigned s = st->seed;
    for (int i = 0; i < OPS; i++) {
        s = s * 1103515245u + 12345u;
        int k = (int)((s >> 8) % SLOTS);
        size_t n = 16 + (s >> 18) % 1009;
        free(st->slot[k]);
        char *p = malloc(n);
        p[0] = (char)n;
        p[n - 1] = (char)k;
        st->slot[k] = p;
    }
    st->seed = s;
    if (++st->generation < GENERATIONS) { /* the successor inherits the objects */
        pthread_t next;
        pthread_create(&next, NULL, serve, st);
        pthread_detach(next);
        return NULL;
    }
    for (int k = 0; k < SLOTS; k++)
        free(st->slot[k]);
    sem_post(&chains_done);
    return NULL;
}

int main(void)
{
    static state_t st[THREADS];
    sem_init(&chains_done, 0, 0);
    for (int t = 0; t < THREADS; t++) {
        st[t].seed = (unsigned)t * 2654435761u + 7;
        for (int k = 0; k < SLOTS; k++)
            st[t].slot[k] = malloc(16 + (size_t)k % 1009);
        pthread_t first;
        pthread_create(&first, NULL, serve, &st[t]);
        pthread_detach(first);
    }
    for (int t = 0; t < THREADS; t++) /* the last generation of each chain */
        sem_wait(&chains_done);
    puts("larson done");
    return 0;
}
