/* ctlsock.c — this process's control connection to tcmd: the Hello
 * handshake, the Bye, and the one descriptor libtcm keeps, which the
 * application may close or reuse at any instant (every use checks it is
 * still ours). */
#define _GNU_SOURCE
#include <errno.h>

#include "client.h"
#include "ctlsock.h"
#include "diag.h"
#include "frame.h"
#include "prim.h"

/* Our control socket, if the descriptor still is: one the application
 * closed (and perhaps reused the number of) is forgotten, never read,
 * written or closed. */
static int own_sock(void)
{
    tcm_proc_t *pr = &tcm__proc;
    int fd = pr->sock;
    if (fd < 0 || tcm__file_is(fd, &pr->sock_id))
        return fd;
    tcm__note("the control socket (descriptor %d) was closed by the application: reconnecting", fd);
    pr->sock = -1;
    return -1;
}

void tcm__ctlsock_close(void)
{
    int fd = own_sock();
    tcm__proc.sock = -1;
    tcm__close(fd);
}

/* Tell the daemon this is a deliberate detach, then close. */
void tcm__ctlsock_say_bye(void)
{
    tcm_proc_t *pr = &tcm__proc;
    if (own_sock() < 0 || pr->pid != tcm__pid())
        return;
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__Bye bye = TCM__BYE__INIT;
    req.version = TCM_PROTO_VERSION;
    req.body_case = TCM__REQUEST__BODY_BYE;
    req.bye = &bye;
    tcm__frame_send(pr->sock, &req);
}

void tcm__ctlsock_close_fds(tcm_handle_t *fds, int n)
{
    for (int i = 0; i < n; i++)
        tcm__close(fds[i]);
}

/* One Hello on a new connection; the answer in *out (a Welcome or an
 * Error), and the descriptors that came with it in fds (-1 where none). */
int tcm__ctlsock_handshake(const char *socket_path, uint32_t resume_id, uint64_t token, int timeout_ms,
                           tcm_handle_t *fd_out, Tcm__Response **out, tcm_handle_t fds[NFDS])
{
    int nfds = 0;
    for (int i = 0; i < NFDS; i++)
        fds[i] = -1;
    tcm_handle_t fd = tcm__connect_server(socket_path); /* a server not ours: -EPERM */
    if (fd < 0)
        return fd;
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__Hello hello = TCM__HELLO__INIT;
    hello.version = TCM_PROTO_VERSION;
    hello.pid = tcm__pid();
    hello.resume_client_id = resume_id;
    hello.resume_token = token;
    if (!resume_id && tcm__proc.left_pid == tcm__pid()) {
        hello.left_client_id = tcm__proc.left_client_id;
        hello.left_token = tcm__proc.left_token;
    }
    req.version = TCM_PROTO_VERSION;
    req.body_case = TCM__REQUEST__BODY_HELLO;
    req.hello = &hello;
    int rc = tcm__frame_send(fd, &req);
    Tcm__Response *resp = rc ? NULL : tcm__frame_recv_fds(fd, timeout_ms, fds, NFDS, &nfds);
    if (!resp) {
        rc = rc ? rc : -errno;
        tcm__close(fd);
        tcm__ctlsock_close_fds(fds, nfds);
        return rc;
    }
    *fd_out = fd;
    *out = resp;
    return 0;
}

Tcm__Response *tcm__ctlsock_ask(Tcm__Request *req, int timeout_ms)
{
    tcm_proc_t *pr = &tcm__proc;
    if (own_sock() < 0 || pr->pid != tcm__pid())
        return NULL;
    req->version = TCM_PROTO_VERSION;
    return tcm__frame_send(pr->sock, req) == 0 ? tcm__frame_recv(pr->sock, timeout_ms) : NULL;
}

bool tcm__daemon_gone_locked(void)
{
    int fd = own_sock();
    return fd < 0 || tcm__socket_hung_up(fd);
}
