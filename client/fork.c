/* fork.c — fork handling: the parent's locks and background thread across
 * fork, and a child that discards the caches and connection it inherited
 * (they are the parent's) and attaches as a new client on first use. With
 * a private heap (the drop-in's, local.c) the child's copy of the heap and
 * of every cache is its own: it keeps them, and the locks are held across
 * the fork so that none of them is copied in the middle of a change. */
#include <string.h>

#include "background.h"
#include "client.h"
#include "ctlsock.h"
#include "fork.h"
#include "prim.h"
#include "profile.h"

/* The background thread is stopped across fork: the child inherits none of
 * its locks or half-done work, and a process with no threads of its own
 * forks single-threaded (which ThreadSanitizer, for one, requires). */
static bool bg_was_running;

/* The locks of the process's caches (the transfer tier, the page-run
 * cache, the thread-cache records), taken across the fork of a process
 * with a private heap. */
static void cache_locks(bool take)
{
    tcm_proc_t *pr = &tcm__proc;
    pthread_mutex_t *locks[] = {&pr->tcache_lock, &pr->spare_lock, &pr->large_lock};
    for (unsigned i = 0; i < sizeof locks / sizeof locks[0]; i++)
        (take ? pthread_mutex_lock : pthread_mutex_unlock)(locks[i]);
    for (unsigned c = 0; c < TCM_NCLASSES; c++)
        (take ? pthread_mutex_lock : pthread_mutex_unlock)(&pr->xfer_lock[c]);
}

TCM_COLD static void fork_prepare(void)
{
    bg_was_running = tcm__proc.bg_running;
    tcm__bg_stop();
    pthread_mutex_lock(&tcm__proc.attach_lock);
    pthread_mutex_lock(&tcm__proc.conn_lock);
    if (tcm__proc.serve)
        cache_locks(true);
}

TCM_COLD static void fork_parent(void)
{
    if (tcm__proc.serve)
        cache_locks(false);
    pthread_mutex_unlock(&tcm__proc.conn_lock);
    pthread_mutex_unlock(&tcm__proc.attach_lock);
    if (bg_was_running)
        tcm__bg_start();
}

/* The forking thread's cache is the parent's. Its record is not freed
 * here but at the child's next registration (tcache.c): the fork handlers
 * of the system malloc (jemalloc's, when redis-server brings it) may not
 * have run yet, and a free that needs one of its locks would wait forever
 * for the parent's thread that held it. */
TCM_COLD static void forget_thread(void)
{
    tcm_thread_t *thr = tcm__tls_thread;
    if (thr) {
        pthread_setspecific(tcm__proc.thread_key, NULL);
        atomic_store(&tcm__proc.forked_thread, thr);
    }
    tcm__thread_forget();
}

TCM_COLD static void fork_child(void)
{
    tcm_proc_t *pr = &tcm__proc;
    /* the forking thread took these in fork_prepare and is the child's
     * only thread: it lets them go (ThreadSanitizer would otherwise still
     * count them held); the others may have been held by threads the
     * child does not have */
    pthread_mutex_unlock(&pr->conn_lock);
    pthread_mutex_unlock(&pr->attach_lock);
    if (pr->serve) { /* a private heap: everything here is the child's own, as it was at the fork */
        cache_locks(false);
        pr->bg_running = false; /* started again at the child's next request (local.c) */
        pr->pid = tcm__pid();
        return;
    }
    pthread_mutex_init(&pr->large_lock, NULL);
    pthread_mutex_init(&pr->tcache_lock, NULL);
    pthread_mutex_init(&pr->spare_lock, NULL);
    tcm__profile_fork_child();
    for (unsigned c = 0; c < TCM_NCLASSES; c++)
        pthread_mutex_init(&pr->xfer_lock[c], NULL);
    pr->epoch++;
    pr->bg_running = false; /* it starts when the child attaches */
    forget_thread();
    if (!atomic_load(&pr->attached))
        return;
    /* the channel is the parent's: never touch it, and keep the heap and
     * metadata mapped, they are the same in the new attachment */
    tcm__unmap(pr->chan, pr->lay.size);
    pr->chan = NULL;
    tcm__ctlsock_close(); /* the parent's connection stays the parent's */
    pr->outage_deadline_ns = 0;
    /* pr->caches is the parent's, freed at the child's attach: see
     * forget_thread for why not here */
    atomic_store(&pr->nthreads, 0);
    atomic_store(&pr->xfer_bytes, 0);
    atomic_store(&pr->large_bytes, 0);
    memset(pr->xfer_backed, 0, sizeof pr->xfer_backed);
    pr->daemon_lost = false;
    atomic_store(&pr->attached, false);
}

void tcm__fork_handlers_install(void)
{
    tcm__at_fork(fork_prepare, fork_parent, fork_child);
}
