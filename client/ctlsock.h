/* ctlsock.h — the control connection to tcmd (ctlsock.c). */
#ifndef TCM_CTLSOCK_H
#define TCM_CTLSOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "client.h"

struct Tcm__Response; /* tcm.pb-c.h: callers that handshake or ask include it (frame.h) */
struct Tcm__Request;

/* How long a process that was attached waits for the answer to a Hello
 * (a tcmd busy adopting a heap answers late; one never attached waits
 * TCM_FRESH_ATTACH_MS). */
#define TCM_HANDSHAKE_MS 10000

/* The descriptors a Welcome carries, in this order. */
enum { FD_HEAP, FD_META, FD_CHANNEL, NFDS };

/* One Hello (a resume when resume_id is not 0) on a new connection to
 * socket_path, answered within timeout_ms of the connect: 0 with the
 * connection in *fd_out, the answer in *out (a Welcome or an Error) and the
 * descriptors that came with it in fds (-1 where none), else -errno
 * (-ETIMEDOUT for a server that took the connection and said nothing). */
TCM_HIDDEN int tcm__ctlsock_handshake(const char *socket_path, uint32_t resume_id, uint64_t token, int timeout_ms,
                                      tcm_handle_t *fd_out, struct Tcm__Response **out, tcm_handle_t fds[NFDS]);
TCM_HIDDEN void tcm__ctlsock_close_fds(tcm_handle_t *fds, int n);
/* Tell the daemon this is a deliberate detach (the next close is one). */
TCM_HIDDEN void tcm__ctlsock_say_bye(void);
/* One request on this process's control connection and its answer (NULL:
 * no connection of ours, or no answer in time). Under attach_lock (one
 * question at a time) and conn_lock (no reconnect swapping the socket). */
TCM_HIDDEN struct Tcm__Response *tcm__ctlsock_ask(struct Tcm__Request *req, int timeout_ms);
/* Close our control socket, if the descriptor still is ours. */
TCM_HIDDEN void tcm__ctlsock_close(void);
/* Our control socket was hung up, or is not ours any more; under
 * conn_lock (a reconnect rewrites the socket and its identity under it:
 * tcm__daemon_gone, reconnect.h, takes it). */
TCM_HIDDEN bool tcm__daemon_gone_locked(void);

#endif
