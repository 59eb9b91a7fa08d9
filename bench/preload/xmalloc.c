/* xmalloc.c — producer/consumer, like xmalloc-test: THREADS threads in a
 * ring, each allocating objects of 8 B to 512 B in batches of BATCH and
 * passing every batch to the next thread, which frees it: every object is
 * freed by a thread other than the one that allocated it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { THREADS = 4, BATCHES = 40000, BATCH = 64, DEPTH = 8 };

typedef struct { /* one thread's inbox: a bounded queue of batches */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    void **q[DEPTH];
    int head, count;
} inbox_t;

static inbox_t inbox[THREADS];

static void put(inbox_t *in, void **batch)
{
    pthread_mutex_lock(&in->lock);
    while (in->count == DEPTH)
        pthread_cond_wait(&in->cond, &in->lock);
    in->q[(in->head + in->count++) % DEPTH] = batch;
    pthread_cond_broadcast(&in->cond);
    pthread_mutex_unlock(&in->lock);
}

static void **take(inbox_t *in, int wait)
{
    void **b = NULL;
    pthread_mutex_lock(&in->lock);
    while (wait && in->count == 0)
        pthread_cond_wait(&in->cond, &in->lock);
    if (in->count) {
        b = in->q[in->head];
        in->head = (in->head + 1) % DEPTH;
        in->count--;
        pthread_cond_broadcast(&in->cond);
    }
    pthread_mutex_unlock(&in->lock);
    return b;
}

static void drop(void **batch)
{
    for (int i = 0; i < BATCH; i++)
        free(batch[i]);
    free(batch);
}

static void *body(void *arg)
{
    long t = (long)arg;
    unsigned s = (unsigned)t * 2654435761u + 1;
    int got = 0;
    for (int i = 0; i < BATCHES; i++) {
        void **batch = malloc(BATCH * sizeof *batch);
        for (int j = 0; j < BATCH; j++) {
            s = s * 1103515245u + 12345u;
            size_t n = 8 + (s >> 8) % 505;
            char *p = malloc(n);
            p[0] = (char)t;
            batch[j] = p;
        }
        put(&inbox[(t + 1) % THREADS], batch);
        for (void **b; (b = take(&inbox[t], 0)); got++)
            drop(b);
    }
    for (; got < BATCHES; got++)
        drop(take(&inbox[t], 1));
    return NULL;
}

int main(void)
{
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        pthread_mutex_init(&inbox[t].lock, NULL);
        pthread_cond_init(&inbox[t].cond, NULL);
    }
    for (long t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, body, (void *)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    puts("xmalloc done");
    return 0;
}
