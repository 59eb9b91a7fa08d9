/* threads.c — what threads do to a malloc, run under the LD_PRELOAD drop-in
 * (tests/preload_test.sh): 300 threads at once allocating and freeing
 * across each other; thread-specific data whose destructors free (and
 * allocate) after the thread's cache is gone; a signal handler that frees;
 * and exit() from a thread while the others still allocate. Prints a line
 * of counts that must not depend on the malloc. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { THREADS = 300, OBJS = 200 };

static pthread_key_t key;
static _Atomic long destructed, checked;
static void *shared[THREADS];

static void destructor(void *p)
{
    char *q = malloc(100); /* allocates after the thread's cache is gone */
    memset(q, 1, 100);
    free(q);
    free(p);
    atomic_fetch_add(&destructed, 1);
}

static void *worker(void *arg)
{
    long id = (long)arg;
    void *mine[OBJS];
    for (int i = 0; i < OBJS; i++) {
        mine[i] = malloc(16 + (size_t)(i * 37 % 2000));
        memset(mine[i], (int)id, 16);
    }
    char *tsd = malloc(64);
    snprintf(tsd, 64, "thread %ld", id);
    pthread_setspecific(key, tsd);
    shared[id] = mine[0];
    for (int i = 1; i < OBJS; i++) {
        if (((unsigned char *)mine[i])[0] == (unsigned char)id)
            atomic_fetch_add(&checked, 1);
        free(mine[i]);
    }
    return NULL;
}

static void *volatile in_handler;

static void on_signal(int sig)
{
    (void)sig;
    free(in_handler); /* a handler that frees, while the main thread does not allocate */
    in_handler = NULL;
}

static void *exiter(void *arg)
{
    (void)arg;
    usleep(20000);
    printf("destructed %ld checked %ld\n", atomic_load(&destructed), atomic_load(&checked));
    fflush(stdout);
    exit(0); /* from a thread, while others allocate */
}

static void *churner(void *arg)
{
    (void)arg;
    for (;;) {
        void *p = malloc(4000);
        free(p);
    }
    return NULL;
}

int main(void)
{
    pthread_key_create(&key, destructor);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)i) != 0)
            return 2;
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < THREADS; i++) /* freed by another thread than the one that allocated */
        free(shared[i]);
    signal(SIGUSR1, on_signal);
    in_handler = malloc(777);
    raise(SIGUSR1);
    if (in_handler)
        return 3;
    pthread_t c[4], e;
    for (int i = 0; i < 4; i++)
        pthread_create(&c[i], NULL, churner, NULL);
    pthread_create(&e, NULL, exiter, NULL);
    pthread_join(e, NULL);
    return 4; /* not reached: the exiter exits */
}
