/* threads.c — tcm-kv's workers as threads of one process (--threads), the
 * way bench/ runs the same server on a heap that is not shared between
 * processes (tcm-kv-peers on glibc or jemalloc). The reference server forks
 * its workers (main.c). */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include "server.h"

typedef struct thread_arg {
    const kv_options_t *o;
    kv_shared_t *sh;
    int index, fd;
    _Atomic int *stop;
} thread_arg_t;

static void *worker_thread(void *p)
{
    thread_arg_t *a = p;
    kv_worker_run(a->o, a->sh, a->index, a->fd, a->stop);
    return NULL;
}

int kv_run_threads(const kv_options_t *o, kv_shared_t *sh, int fd, volatile sig_atomic_t *stopping)
{
    static _Atomic int stop;
    pthread_t tids[KV_MAX_WORKERS];
    thread_arg_t args[KV_MAX_WORKERS];
    /* blocked but while sigsuspend waits (a stop between the check and a
     * pause() was lost), and so in every worker thread, which inherit it */
    sigset_t waited, unblocked;
    sigemptyset(&waited);
    sigaddset(&waited, SIGTERM);
    sigaddset(&waited, SIGINT);
    pthread_sigmask(SIG_BLOCK, &waited, &unblocked);
    for (int i = 0; i < o->workers; i++) {
        args[i] = (thread_arg_t){o, sh, i, dup(fd), &stop}; /* each loop closes its own */
        pthread_create(&tids[i], NULL, worker_thread, &args[i]);
    }
    while (!*stopping)
        sigsuspend(&unblocked);
    atomic_store(&stop, 1);
    for (int i = 0; i < o->workers; i++)
        pthread_join(tids[i], NULL);
    return 0;
}
