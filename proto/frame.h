/* frame.h — length-prefixed protobuf frames on the control socket. The only
 * code that packs and unpacks control messages besides protoc-c's output. */
#ifndef TCM_FRAME_H
#define TCM_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "prim.h" /* tcm__connect */
#include "tcm.pb-c.h"

#define TCM_PROTO_VERSION 1u
#define TCM_FRAME_MAX (64u * 1024u)

/* Pack msg behind a 4-byte big-endian length into a malloc'd buffer. */
uint8_t *tcm__frame_pack(const ProtobufCMessage *msg, size_t *len);
uint32_t tcm__frame_len(const uint8_t hdr[4]);
/* Split the next frame off buf: 1 and the payload when one is complete, 0
 * when more bytes are needed, -EMSGSIZE for a length over TCM_FRAME_MAX.
 * Pure, so the daemon and the fuzz target share it. */
int tcm__frame_next(const uint8_t *buf, size_t len, const uint8_t **payload, size_t *plen);

/* Blocking helpers for the client library and tcmctl: send one Request and
 * read one Response (NULL on error, errno set). timeout_ms < 0 waits forever. */
int tcm__frame_send(tcm_handle_t fd, const Tcm__Request *req);
Tcm__Response *tcm__frame_recv(tcm_handle_t fd, int timeout_ms);
/* The same, collecting descriptors sent with the frame (SCM_RIGHTS). */
Tcm__Response *tcm__frame_recv_fds(tcm_handle_t fd, int timeout_ms, tcm_handle_t *fds, int maxfds, int *nfds);

/* The default socket: $TCM_SOCKET, else the runtime socket,
 * $XDG_RUNTIME_DIR/tcm/tcmd.sock, else /tmp/tcm-UID/tcmd.sock. */
const char *tcm__default_socket(char *buf, size_t len);
const char *tcm__runtime_socket(char *buf, size_t len);

/* Connect to tcmd's control socket, and hang up unless the process that
 * serves it is one this process may trust with its memory (the rule is at
 * the definition): handle, or -errno; -EPERM for a server refused, with
 * tcm__server_refusal() saying why (the last refusal, "" after a
 * connection that was not refused). */
tcm_handle_t tcm__connect_server(const char *path);
const char *tcm__server_refusal(void);

#endif
