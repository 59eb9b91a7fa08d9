/* lifecycle.c — attaching to tcmd (handshake, mapping the segments at the
 * address the daemon chose) and detaching, at tcm_shutdown or at exit.
 * Reconnecting to a tcmd that restarted is reconnect.c's, the control
 * socket itself ctlsock.c's, fork handling fork.c's, the hot globals
 * state.c's. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "background.h"
#include "client.h"
#include "ctlsock.h"
#include "diag.h"
#include "fork.h"
#include "frame.h"
#include "lifecycle.h"
#include "tcm.h"
#include "prim.h"
#include "reconnect.h"

TCM_COLD static void at_exit(void)
{
    tcm__library_enter(); /* never left: the process is going */
    /* the kernel closes the socket; the daemon reclaims every cache. A tcmd
     * that replaced the one we knew should hear the Bye too. */
    if (!atomic_load(&tcm__proc.attached) || tcm__proc.pid != tcm__pid() || tcm__proc.serve)
        return;
    if (tcm__daemon_gone()) {
        tcm__proc.outage_deadline_ns = tcm__now_ns(); /* one try, no waiting */
        tcm__await_daemon();
    }
    tcm__ctlsock_say_bye();
}

static void once_init(void)
{
    for (unsigned c = 0; c < TCM_NCLASSES; c++)
        pthread_mutex_init(&tcm__proc.xfer_lock[c], NULL);
    tcm__fork_handlers_install();
    atexit(at_exit);
}

/* The parts of the metadata the client reads, once heap and meta are set. */
static void use_meta(tcm_proc_t *pr)
{
    const uint8_t *mb = (const uint8_t *)pr->meta;
    pr->classes = (const tcm_class_info_t *)(mb + pr->meta->off_classes);
    pr->page_span = (const uint32_t *)(mb + pr->meta->off_page_span);
    pr->spans = (const tcm_span_t *)(mb + pr->meta->off_spans);
    pr->roots = (const tcm_root_t *)(mb + pr->meta->off_roots);
    pr->bell = (tcm_bell_t *)pr->heap;
    pr->heap_id = pr->meta->heap_id;
}

/* The channel is mapped at pr->chan for lay: the rest of it, and this
 * process's private records of what it caches. */
static int use_channel(tcm_proc_t *pr)
{
    pr->chan_hdr = (tcm_chan_hdr_t *)pr->chan;
    pr->ring = (tcm_ring_t *)(pr->chan + pr->lay.off_ring);
    pr->slots = (tcm_slot_t *)(pr->chan + pr->lay.off_slots);
    memset(pr->xfer_backed, 0, sizeof pr->xfer_backed);
    free(pr->caches); /* a fork child's copy of its parent's */
    pr->caches = calloc(pr->lay.max_threads, sizeof *pr->caches);
    /* a fork child's copy says what its parent mapped (a shared mapping's
     * pages are not mapped in the child), a heap mapped before may be
     * another: none of it is known mapped now */
    free((void *)pr->mapped);
    pr->mapped = pr->serve ? NULL : calloc((pr->heap_size >> TCM_PAGE_SHIFT) / 64 + 1, sizeof *pr->mapped);
    return pr->caches ? 0 : -ENOMEM;
}

/* Attached: the hot path's globals, and the background thread. */
static void go_live(tcm_proc_t *pr)
{
    pr->pid = tcm__pid();
    pr->daemon_lost = false;
    pr->outage_deadline_ns = 0;
    atomic_store(&tcm__page_class, (const uint8_t *)pr->meta + pr->meta->off_page_class);
    atomic_store(&tcm__heap_base, (uintptr_t)pr->heap);
    atomic_store(&tcm__heap_bytes, pr->heap_size);
    atomic_store(&tcm__heap_granules, pr->heap_size >> TCM_GRANULE_SHIFT);
    atomic_store(&pr->attached, true);
    if (!pr->serve) /* a private heap's starts once it has memory to give back (local.c) */
        tcm__bg_start();
}

/* Map the segments of a Welcome from the descriptors that came with it
 * (the heap read-write at the daemon's base, the metadata read-only, the
 * channel read-write); fds are consumed. */
static int map_segments(const Tcm__Welcome *w, tcm_handle_t *fds, char *err, size_t errlen)
{
    tcm_proc_t *pr = &tcm__proc;
    if (pr->heap && (strcmp(pr->heap_name, w->heap_name) != 0 || (uintptr_t)pr->heap != w->base_address ||
                     pr->heap_size != w->heap_size || pr->heap_id != w->heap_id)) {
        /* another heap than before a shutdown or fork (another daemon, or
         * the same name replaced with --discard-heap) */
        tcm__unmap(pr->heap, pr->heap_size);
        tcm__unmap((void *)pr->meta, pr->meta_size);
        pr->heap = NULL;
        pr->meta = NULL;
        atomic_store(&tcm__heap_granules, 0);
        atomic_store(&tcm__heap_bytes, 0);
    }
    if (!pr->heap) {
        pr->heap = tcm__map(fds[FD_HEAP], w->heap_size, (void *)(uintptr_t)w->base_address, true, err, errlen);
        if (!pr->heap)
            return -errno;
        pr->heap_size = w->heap_size;
        snprintf(pr->heap_name, sizeof pr->heap_name, "%s", w->heap_name);

        const tcm_meta_hdr_t *m = tcm__map(fds[FD_META], sizeof *m, NULL, false, err, errlen);
        if (!m)
            goto fail_heap;
        uint64_t msize = m->size;
        uint32_t version = m->version;
        bool ok = m->magic == TCM_META_MAGIC && m->base == w->base_address && m->heap_size == w->heap_size &&
                  m->page_shift == TCM_PAGE_SHIFT && m->heap_id == w->heap_id;
        tcm__unmap((void *)m, sizeof *m);
        if (!ok) {
            snprintf(err, errlen, "metadata segment %s does not match the daemon's welcome", w->meta_name);
            goto fail_heap;
        }
        if (version != TCM_ABI_VERSION) { /* docs/DESIGN.md, "Upgrades" */
            snprintf(err, errlen, "the heap's layout version is %u, this libtcm speaks %u: run the tcmd of "
                     "this libtcm's release", version, TCM_ABI_VERSION);
            goto fail_heap;
        }
        pr->meta = tcm__map(fds[FD_META], msize, NULL, false, err, errlen);
        if (!pr->meta)
            goto fail_heap;
        pr->meta_size = msize;
        use_meta(pr);
    }
    for (unsigned c = 0; c < TCM_NCLASSES; c++)
        if (pr->classes[c].size != w->class_size[c] || tcm__class_size(c) != w->class_size[c]) {
            snprintf(err, errlen, "size class %u differs between tcmd and libtcm (version mismatch)", c);
            return -EPROTO;
        }

    tcm__chan_layout(&pr->lay, pr->classes, w->max_threads, false);
    pr->chan = tcm__map(fds[FD_CHANNEL], pr->lay.size, NULL, true, err, errlen);
    if (!pr->chan)
        return -ENOMEM;
    pr->chan_hdr = (tcm_chan_hdr_t *)pr->chan;
    if (pr->chan_hdr->magic != TCM_CHAN_MAGIC || pr->chan_hdr->client_id != w->client_id ||
        pr->chan_hdr->size != pr->lay.size || pr->chan_hdr->off_tcaches != pr->lay.off_tcaches) {
        snprintf(err, errlen, "channel %s does not match libtcm's layout (version mismatch)", w->channel_name);
        tcm__unmap(pr->chan, pr->lay.size);
        pr->chan = NULL;
        return -EPROTO;
    }
    return 0;

fail_heap:
    tcm__unmap(pr->heap, pr->heap_size);
    pr->heap = NULL;
    return -EIO;
}

/* A tcmd whose socket file is there but that does not answer, or that
 * hangs up during the handshake, is restarting. */
static bool restarting(int err, const char *socket_path)
{
    return (err == -ECONNREFUSED && tcm__path_exists(socket_path)) || err == -ECONNRESET || err == -EPIPE;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

TCM_COLD int tcm__attach_private(uint8_t *heap, uint64_t heap_size, const tcm_meta_hdr_t *meta, uint64_t meta_size,
                                 uint8_t *chan, uint32_t max_threads, void (*serve)(void), void (*tick)(uint64_t))
{
    tcm_proc_t *pr = &tcm__proc;
    pthread_once(&once, once_init);
    pr->heap = heap;
    pr->heap_size = heap_size;
    pr->meta = meta;
    pr->meta_size = meta_size;
    use_meta(pr);
    tcm__chan_layout(&pr->lay, pr->classes, max_threads, true);
    pr->chan = chan;
    pr->serve = serve;
    pr->tick = tick;
    if (use_channel(pr) != 0)
        return -ENOMEM;
    pr->client_id = pr->chan_hdr->client_id;
    pr->sock = -1;
    go_live(pr);
    return 0;
}

TCM_COLD static int attach_locked(const char *socket_path)
{
    tcm_proc_t *pr = &tcm__proc;
    char path[108], err[320] = "";
    pthread_once(&once, once_init);
    if (!socket_path)
        socket_path = tcm__default_socket(path, sizeof path);
    int rc;
    tcm_handle_t fd, fds[NFDS];
    Tcm__Response *resp;
    uint64_t deadline = 0;
    /* Only a process that was attached (or whose parent was, before a
     * fork: it kept the heap mapped) has objects to keep and a tcmd to wait
     * for. One that never was gives up at once when nothing listens, and
     * after TCM_FRESH_ATTACH_MS when something listens but does not answer:
     * a stale socket file must not hold every program up. */
    bool rides = pr->heap != NULL;
    int answer_ms = rides ? TCM_HANDSHAKE_MS : TCM_FRESH_ATTACH_MS;
    while ((rc = tcm__ctlsock_handshake(socket_path, 0, 0, answer_ms, &fd, &resp, fds)) != 0) {
        uint64_t now = tcm__now_ns();
        /* once a restart is under way, the socket file may be missing for a moment */
        if (!rides || (!restarting(rc, socket_path) && !(deadline && rc == -ENOENT))) {
            tcm__note("attach to %s failed: %s", socket_path, strerror(-rc));
            return rc;
        }
        if (!deadline) {
            deadline = now + tcm__reconnect_timeout_ns();
            fprintf(stderr, "tcm: tcmd on %s does not answer (restarting?): waiting up to %.0f s\n", socket_path,
                    (double)(deadline - now) / 1e9);
        }
        if (now >= deadline)
            return rc;
        tcm__sleep_ns(20000000);
    }
    if (resp->body_case == TCM__RESPONSE__BODY_ERROR) {
        fprintf(stderr, "tcm: tcmd refused to attach: %s\n", resp->error->message);
        rc = -(int)(resp->error->code ? resp->error->code : EPROTO);
        goto out_resp;
    }
    if (resp->body_case != TCM__RESPONSE__BODY_WELCOME || resp->welcome->n_class_size != TCM_NCLASSES ||
        resp->welcome->page_shift != TCM_PAGE_SHIFT || resp->welcome->max_threads == 0 ||
        resp->welcome->max_threads > TCM_MAX_THREADS) {
        fprintf(stderr, "tcm: unexpected answer from tcmd on %s\n", socket_path);
        rc = -EPROTO;
        goto out_resp;
    }
    if (!tcm__handles_travel()) { /* Windows: open them by name */
        fds[FD_HEAP] = tcm__shm_open(resp->welcome->heap_name, true);
        fds[FD_META] = tcm__shm_open(resp->welcome->meta_name, false);
        fds[FD_CHANNEL] = tcm__shm_open(resp->welcome->channel_name, true);
    }
    if (fds[FD_HEAP] < 0 || fds[FD_META] < 0 || fds[FD_CHANNEL] < 0) {
        fprintf(stderr, "tcm: tcmd on %s sent no segments with its welcome\n", socket_path);
        rc = -EPROTO;
        goto out_resp;
    }
    rc = map_segments(resp->welcome, fds, err, sizeof err);
    if (rc) {
        fprintf(stderr, "tcm: cannot attach to tcmd on %s: %s\n", socket_path, err);
        goto out_resp;
    }
    if (use_channel(pr) != 0) {
        tcm__unmap(pr->chan, pr->lay.size);
        pr->chan = NULL;
        rc = -ENOMEM;
        goto out_resp;
    }
    pr->client_id = resp->welcome->client_id;
    pr->token = resp->welcome->token;
    pr->sock = fd;
    tcm__file_id(fd, &pr->sock_id);
    if (socket_path != pr->socket_path)
        snprintf(pr->socket_path, sizeof pr->socket_path, "%s", socket_path);
    tcm__response__free_unpacked(resp, NULL);
    tcm__ctlsock_close_fds(fds, NFDS); /* the mappings keep the segments */
    go_live(pr);
    return 0;

out_resp:
    tcm__response__free_unpacked(resp, NULL);
    tcm__close(fd);
    tcm__ctlsock_close_fds(fds, NFDS);
    return rc;
}

/* Attach on first use: to the daemon this process (or, after fork, its
 * parent) attached to before, else to the default socket. */
int (*tcm__attach_first)(void);

int tcm__ensure_attached(void)
{
    if (tcm_likely(atomic_load_explicit(&tcm__proc.attached, memory_order_acquire)))
        return 0;
    if (tcm__attach_first) {
        pthread_mutex_lock(&tcm__proc.attach_lock);
        int rc = atomic_load(&tcm__proc.attached) ? 0 : tcm__attach_first();
        pthread_mutex_unlock(&tcm__proc.attach_lock);
        return rc;
    }
    return tcm_init(tcm__proc.socket_path[0] ? tcm__proc.socket_path : NULL);
}

const char *tcm__attach_failed_note;

/* What an attach that failed with rc found, in a user's words. */
static const char *attach_failure(int rc)
{
    switch (rc) {
    case -ENOENT:
        return "no tcmd there (no socket file)";
    case -ECONNREFUSED:
        return "nothing listens on it (tcmd is not running; the socket file is stale)";
    case -ETIMEDOUT:
        return "tcmd there did not answer in time";
    case -EPERM:
        return *tcm__server_refusal() ? tcm__server_refusal() : strerror(-rc);
    default:
        return strerror(-rc);
    }
}

TCM_COLD int tcm_init(const char *socket_path)
{
    static bool reported;
    pthread_mutex_lock(&tcm__proc.attach_lock);
    int rc = !atomic_load(&tcm__proc.attached) ? attach_locked(socket_path)
             : socket_path && strcmp(socket_path, tcm__proc.socket_path) != 0 ? -EBUSY /* one tcmd at a time */
                                                                            : 0;
    pthread_mutex_unlock(&tcm__proc.attach_lock);
    if (rc == -EBUSY)
        return rc; /* (attached: said nothing) */
    if (rc && !reported) {
        char path[108];
        reported = true;
        fprintf(stderr, "tcm: cannot attach to tcmd on %s: %s%s\n",
                socket_path ? socket_path : tcm__default_socket(path, sizeof path), attach_failure(rc),
                tcm__attach_failed_note ? tcm__attach_failed_note : "");
    }
    return rc;
}

void tcm__detach_locked(void)
{
    tcm_proc_t *pr = &tcm__proc;
    if (tcm__daemon_gone()) { /* the application closed our socket: one try to say Bye on a new one */
        pr->outage_deadline_ns = tcm__now_ns();
        tcm__await_daemon();
    }
    tcm__ctlsock_say_bye();
    pr->left_client_id = pr->client_id;
    pr->left_token = pr->token;
    pr->left_pid = tcm__pid();
    pr->epoch++;
    /* closing the socket after Bye is the detach: the daemon reclaims what
     * is left. The channel stays mapped (the daemon unlinks it) so that a
     * thread that still holds a stale cache pointer lands in the slow path,
     * not a fault. */
    tcm__ctlsock_close();
    free(pr->caches);
    pr->caches = NULL;
    atomic_store(&pr->nthreads, 0);
    atomic_store(&pr->attached, false);
}
