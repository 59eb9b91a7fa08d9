/* reconnect.c — riding through a tcmd restart: when the control socket
 * hangs up, wait (bounded by reconnect_timeout) for the next tcmd on the same
 * socket and resume with it as the same client, keeping every mapping. The
 * channel calls it when a request goes unanswered; attaching (lifecycle.c)
 * uses the same bound for a tcmd that is restarting when a process first
 * attaches. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "client.h"
#include "ctlsock.h"
#include "diag.h"
#include "frame.h"
#include "prim.h"
#include "reconnect.h"

/* How long to wait for a tcmd that is restarting: $TCM_RECONNECT_TIMEOUT
 * seconds, else what tcmd published, else tcmd's default. */
TCM_COLD uint64_t tcm__reconnect_timeout_ns(void)
{
    const char *env = tcm__env("TCM_RECONNECT_TIMEOUT");
    if (env && *env)
        return (uint64_t)(strtod(env, NULL) * 1e9);
    if (tcm__proc.meta)
        return atomic_load_explicit(&tcm__proc.meta->config.reconnect_ms, memory_order_relaxed) * 1000000ull;
    return TCM_RECONNECT_DEFAULT_S * 1000000000ull;
}

/* Whether this outage's wait was announced (then its end is too); under
 * conn_lock. */
static bool wait_announced;

/* Under conn_lock: a reconnect on another thread replaces the socket and
 * its identity (sock_id), and an identity read half-written looked like a
 * socket the application had closed, which own_sock then forgot
 * (integration.restart under TSan). */
bool tcm__daemon_gone(void)
{
    pthread_mutex_lock(&tcm__proc.conn_lock);
    bool gone = tcm__daemon_gone_locked();
    pthread_mutex_unlock(&tcm__proc.conn_lock);
    return gone;
}

TCM_COLD int tcm__await_daemon(void)
{
    tcm_proc_t *pr = &tcm__proc;
    pthread_mutex_lock(&pr->conn_lock);
    int rc = 0;
    if (!atomic_load(&pr->attached)) {
        rc = -ENOTCONN;
        goto out;
    }
    if (!tcm__daemon_gone_locked()) { /* another thread reconnected */
        pr->outage_deadline_ns = 0;
        goto out;
    }
    uint64_t now = tcm__now_ns();
    if (!pr->outage_deadline_ns) {
        pr->outage_deadline_ns = now + tcm__reconnect_timeout_ns();
        wait_announced = pr->outage_deadline_ns > now; /* (a timeout of 0 waits for nothing) */
        if (wait_announced)
            fprintf(stderr, "tcm: lost the connection to tcmd on %s: waiting up to %.0f s for it to come back\n",
                    pr->socket_path, (double)(pr->outage_deadline_ns - now) / 1e9);
    }
    tcm_handle_t fd, fds[NFDS];
    Tcm__Response *resp;
    rc = tcm__ctlsock_handshake(pr->socket_path, pr->client_id, pr->token, TCM_HANDSHAKE_MS, &fd, &resp, fds);
    tcm__ctlsock_close_fds(fds, NFDS); /* a resume keeps its mappings */
    if (rc == 0) {
        if (resp->body_case == TCM__RESPONSE__BODY_WELCOME && resp->welcome->resumed &&
            resp->welcome->client_id == pr->client_id) {
            tcm__ctlsock_close();
            pr->sock = fd;
            tcm__file_id(fd, &pr->sock_id);
            atomic_fetch_add(&pr->conn_gen, 1);
            pr->outage_deadline_ns = 0;
            pr->daemon_lost = false;
            if (wait_announced)
                fprintf(stderr, "tcm: reconnected to tcmd (pid %u) as client %u\n", resp->welcome->daemon_pid,
                        pr->client_id);
            else
                tcm__note("reconnected to tcmd (pid %u) as client %u", resp->welcome->daemon_pid, pr->client_id);
            wait_announced = false;
        } else {
            fprintf(stderr, "tcm: the tcmd now on %s does not know this process: %s\n", pr->socket_path,
                    resp->body_case == TCM__RESPONSE__BODY_ERROR ? resp->error->message : "unexpected answer");
            tcm__close(fd);
            rc = -ESRCH;
        }
        tcm__response__free_unpacked(resp, NULL);
    } else {
        rc = now >= pr->outage_deadline_ns ? -ETIMEDOUT : -EAGAIN;
    }
out:
    pthread_mutex_unlock(&pr->conn_lock);
    return rc;
}
