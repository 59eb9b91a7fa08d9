/* clientwatch.c — the main thread's side of a client's life: a client is
 * alive while its process runs (a pidfd per client, polled here, and a
 * liveness timer for what the poll cannot see), never because of its
 * connection: a process that closes its socket keeps its caches, is told
 * to reconnect, and resumes as the same client. Clients the heap thread
 * has reaped are freed here. Main thread only. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "clientwatch.h"
#include "heapthread.h"
#include "holders.h"
#include "log.h"
#include "prim.h"
#include "segments.h"
#include "server.h"
#include "transport.h"

/* A client's connection has gone. If it said Bye, it detached: reclaim.
 * If its process has ended, it died: reclaim. A living process has only
 * lost its connection (it closed the descriptor, or the connection broke):
 * its caches are still in use, so nothing is taken back; it is told so
 * through its channel and reconnects as the same client at its next slow
 * path. */
void tcm__client_conn_closed(tcm_conn_t *conn)
{
    tcm_client_t *c = conn->client;
    if (!c)
        return;
    c->conn = NULL;
    conn->client = NULL;
    tcm_server_t *srv = conn->srv;
    tcm_client_rec_t *rec = c->rec;
    if (atomic_load(&rec->said_bye) || !tcm__client_alive(c)) {
        tcm__log_peer(TCM_LOG_DEBUG, tcm__log_source_uid(rec->uid), "client %u (pid %u): control connection closed",
                      rec->id, rec->pid);
        tcm__client_gone(srv, c);
        return;
    }
    tcm__log_peer(TCM_LOG_INFO, tcm__log_source_uid(rec->uid),
                  "client %u (pid %u): lost its control connection while running; kept, asked to reconnect", rec->id,
                  rec->pid);
    TCM_STAT_ADD_MAIN(srv->meta, clients_disconnected, 1);
    atomic_store(&((tcm_chan_hdr_t *)c->chan)->resume_wanted, 1);
}

void tcm__client_gone(tcm_server_t *srv, tcm_client_t *c)
{
    uint32_t state = atomic_load(&c->rec->state);
    if (state != TCM_REC_ACTIVE && state != TCM_REC_EVICTED)
        return;
    atomic_store_explicit(&c->rec->state, TCM_REC_DEAD, memory_order_release);
    tcm__heap_kick(srv);
}

static void on_proc_closed(uv_handle_t *handle)
{
    tcm_client_t *c = handle->data;
    tcm__client_destroy(c->srv, c);
}

/* Frees a reaped client: its connection closed, its watch, then it. */
static void free_reaped(tcm_server_t *srv, tcm_client_t *c)
{
    if (c->conn) { /* a reaped client has no say any more */
        c->conn->client = NULL;
        tcm__conn_close(c->conn);
    }
    if (c->proc_polled && !uv_is_closing((uv_handle_t *)&c->proc_poll))
        uv_close((uv_handle_t *)&c->proc_poll, on_proc_closed);
    else
        tcm__client_destroy(srv, c);
}

/* Clients the heap thread reaped are freed here, unless a view that began
 * before they left the table may still read them: those wait for it. */
static void on_reaped(uv_async_t *async)
{
    tcm_server_t *srv = async->data;
    pthread_mutex_lock(&srv->reaped_lock);
    tcm_client_t *list = srv->reaped;
    srv->reaped = NULL;
    pthread_mutex_unlock(&srv->reaped_lock);
    for (tcm_client_t *next; list; list = next) {
        next = list->next_reaped;
        list->reaped_after = srv->views_begun;
        list->next_reaped = srv->reaped_held;
        srv->reaped_held = list;
    }
    uint64_t oldest = UINT64_MAX;
    for (int k = 0; k < TCM_VIEW_KINDS; k++)
        if (srv->view_running[k] && srv->view_running[k] < oldest)
            oldest = srv->view_running[k];
    for (tcm_client_t **at = &srv->reaped_held, *c; (c = *at) != NULL;) {
        if (c->reaped_after < oldest) {
            *at = c->next_reaped;
            free_reaped(srv, c);
        } else {
            at = &c->next_reaped;
        }
    }
}

static void on_proc_exit(uv_poll_t *poll, int status, int events)
{
    tcm_client_t *c = poll->data;
    (void)status, (void)events;
    uv_poll_stop(poll);
    tcm__log_peer(TCM_LOG_DEBUG, tcm__log_source_uid(c->rec->uid), "client %u (pid %u): process ended", c->rec->id,
                  c->rec->pid);
    tcm__client_gone(c->srv, c);
}

void tcm__client_watch(tcm_server_t *srv, tcm_client_t *c)
{
    static bool told;
    c->srv = srv;
    if (!tcm__proc_watch_pollable() && c->proc >= 0 && !told) {
        told = true;
        tcm__log(TCM_LOG_INFO, "pidfd_open is refused here (an old kernel, a seccomp filter): client processes "
                 "are watched through /proc, once a second");
    }
    if (!tcm__proc_watch_pollable() || c->proc < 0 || c->proc_polled)
        return;
    if (uv_poll_init(srv->loop, &c->proc_poll, c->proc) != 0)
        return; /* the liveness timer still asks every second */
    c->proc_polled = true;
    c->proc_poll.data = c;
    uv_poll_start(&c->proc_poll, UV_READABLE, on_proc_exit);
}

/* A client whose channel broke under tcmd (shrunk or punched: its mapping
 * in tcmd now reads zeros) loses its attachment: it is evicted, its
 * connection is closed and it may not resume. What its caches listed is
 * reclaimed from what can still be read once its process has ended. */
static void cut_off(tcm_server_t *srv, tcm_client_t *c)
{
    c->cut_off = true;
    tcm__log_peer(TCM_LOG_WARN, c->rec->pid,
                     "client %u (pid %u): its channel %s was shrunk or punched under tcmd: cut off (its memory "
                     "comes back when its process ends)",
                     c->rec->id, c->rec->pid, c->rec->chan_name);
    TCM_STAT_ADD_MAIN(srv->meta, clients_cut_off, 1);
    uint32_t state = TCM_REC_ACTIVE;
    atomic_compare_exchange_strong(&c->rec->state, &state, TCM_REC_EVICTED);
    if (c->conn) {
        tcm_conn_t *conn = c->conn;
        c->conn = NULL;
        conn->client = NULL;
        tcm__conn_close(conn);
    }
}

/* Every second: clients whose process ended without the poll noticing
 * (adopted ones, platforms without pidfds), and channels that broke. */
static void on_liveness(uv_timer_t *timer)
{
    tcm_server_t *srv = timer->data;
    if (atomic_load(&srv->heap_truncated) && !srv->heap_truncated_told) {
        srv->heap_truncated_told = true;
        tcm__log(TCM_LOG_ERROR, "heap segment %s was truncated by a client: the contents of every object are lost",
                 srv->heap_name);
    }
    /* what a departed process left is only called leaked once every live
     * process had a decay window to give back what it cached of it */
    tcm__holders_warn(srv, atomic_load(&srv->meta->config.decay_ms) / 1000 + TCM_HOLDER_WARN_SLACK_S);
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = tcm__client_attached(srv, i);
        if (!c)
            continue;
        if (atomic_load(&c->chan_broken) && !c->cut_off)
            cut_off(srv, c);
        if (tcm__client_alive(c))
            continue;
        tcm__log_peer(TCM_LOG_INFO, tcm__log_source_uid(c->rec->uid), "client %u (pid %u) has ended%s",
                      c->rec->id, c->rec->pid, c->conn ? "" : " (it had no connection)");
        tcm__client_gone(srv, c);
    }
}

void tcm__clientwatch_start(tcm_server_t *srv)
{
    uv_timer_init(srv->loop, &srv->liveness);
    srv->liveness.data = srv;
    uv_timer_start(&srv->liveness, on_liveness, 1000, 1000);
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) { /* adopted ones */
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (c)
            tcm__client_watch(srv, c);
    }
    uv_async_init(srv->loop, &srv->reaped_async, on_reaped);
    srv->reaped_async.data = srv;
}

bool tcm__view_begin(tcm_server_t *srv, enum tcm_view_kind kind)
{
    if (srv->view_running[kind])
        return false;
    srv->view_running[kind] = ++srv->views_begun;
    return true;
}

void tcm__view_end(tcm_server_t *srv, enum tcm_view_kind kind)
{
    srv->view_running[kind] = 0;
    /* (at close the handle is gone: tcm__clientwatch_drain frees them) */
    if (srv->reaped_held && !uv_is_closing((uv_handle_t *)&srv->reaped_async))
        uv_async_send(&srv->reaped_async);
}

void tcm__clientwatch_drain(tcm_server_t *srv)
{
    on_reaped(&srv->reaped_async);
}
