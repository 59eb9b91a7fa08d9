/* control.c — the main loop's control side put together: the descriptor
 * limits, the client watch (clientwatch.c), the mailbox, and the listener
 * (transport.c) answering requests with handlers.c; and its orderly close.
 * Main thread only. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "clientwatch.h"
#include "control.h"
#include "handlers.h"
#include "heapthread.h"
#include "log.h"
#include "mailbox.h"
#include "metrics.h"
#include "prim.h"
#include "server.h"
#include "transport.h"

/* Descriptors besides connections, channels and pidfds: the segments, the
 * log, libuv's own, the descriptors a Welcome sends (briefly open). */
#define TCM_FD_RESERVE 256u

/* Descriptors: a control connection is one, an attached client also has
 * its channel and its pidfd open in tcmd. The soft limit goes up to what
 * the caps need; under a lower hard limit the connection cap shrinks to fit
 * (each connection may become a client of three). */
static void fit_descriptors(tcm_server_t *srv)
{
    uint64_t clients = srv->max_clients, conns = TCM_CONNS_PER_CLIENT * clients;
    uint64_t want = conns + TCM_CONTROL_OPERATOR_RESERVE + 2 * clients + TCM_METRICS_FDS + TCM_FD_RESERVE, now = 0;
    int err = tcm__fd_limit_raise(want, &now);
    srv->control_max_conns = (uint32_t)conns;
    if (!err && now >= want)
        return;
    uint64_t fixed = TCM_FD_RESERVE + TCM_METRICS_FDS, avail = now > fixed + 48 ? now - fixed : 48;
    srv->control_max_conns = (uint32_t)(avail >= 3 * clients ? avail - 2 * clients : avail / 3);
    tcm__log(TCM_LOG_WARN, "setrlimit(RLIMIT_NOFILE, %llu) failed: %s: the limit is %llu descriptors, so at most %u "
             "control connections (raise the hard limit to %llu for %u clients)",
             (unsigned long long)want, err ? strerror(-err) : "above the hard limit", (unsigned long long)now,
             srv->control_max_conns, (unsigned long long)want, (unsigned)clients);
}

int tcm__control_start(tcm_server_t *srv)
{
    fit_descriptors(srv);
    tcm__clientwatch_start(srv);
    tcm__mailbox_start(srv, tcm__heap_kick);
    static const tcm_transport_cbs_t handlers = {tcm__control_handle, tcm__client_conn_closed};
    return tcm__transport_listen(srv, &handlers);
}

static void close_walk(uv_handle_t *handle, void *arg)
{
    (void)arg;
    if (!uv_is_closing(handle))
        uv_close(handle, NULL);
}

void tcm__control_close(tcm_server_t *srv)
{
    tcm__mailbox_cancel(srv); /* the heap thread has stopped: what waits for it is answered now */
    tcm__conns_close_all(srv);
    tcm__metrics_close(srv);
    uv_walk(srv->loop, close_walk, srv); /* listeners, timers, signals */
    uv_run(srv->loop, UV_RUN_DEFAULT);
    tcm__clientwatch_drain(srv);
    /* libuv removes the socket file when it closes the listener; a heap left
     * for the next tcmd keeps one, so that new processes wait for it */
    if (srv->keep_segments)
        tcm__socket_placeholder(srv->socket_path);
    else
        tcm__unlink(srv->socket_path);
    if (srv->metrics_socket[0]) /* (bound under another name: libuv does not remove it) */
        tcm__unlink(srv->metrics_socket);
}
