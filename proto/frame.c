/* frame.c — framing for the control protocol. */
#define _GNU_SOURCE
#include "frame.h"
#include "prim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint8_t *tcm__frame_pack(const ProtobufCMessage *msg, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(n + 4);
    if (!buf)
        return NULL;
    buf[0] = (uint8_t)(n >> 24);
    buf[1] = (uint8_t)(n >> 16);
    buf[2] = (uint8_t)(n >> 8);
    buf[3] = (uint8_t)n;
    protobuf_c_message_pack(msg, buf + 4);
    *len = n + 4;
    return buf;
}

uint32_t tcm__frame_len(const uint8_t hdr[4])
{
    return (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
}

int tcm__frame_next(const uint8_t *buf, size_t len, const uint8_t **payload, size_t *plen)
{
    if (len < 4)
        return 0;
    uint32_t n = tcm__frame_len(buf);
    if (n > TCM_FRAME_MAX)
        return -EMSGSIZE;
    if (len - 4 < n)
        return 0;
    *payload = buf + 4;
    *plen = n;
    return 1;
}

int tcm__frame_send(tcm_handle_t fd, const Tcm__Request *req)
{
    size_t len;
    uint8_t *buf = tcm__frame_pack(&req->base, &len);
    if (!buf)
        return -ENOMEM;
    int err = tcm__send_all(fd, buf, len);
    free(buf);
    return err;
}

Tcm__Response *tcm__frame_recv(tcm_handle_t fd, int timeout_ms)
{
    return tcm__frame_recv_fds(fd, timeout_ms, NULL, 0, NULL);
}

Tcm__Response *tcm__frame_recv_fds(tcm_handle_t fd, int timeout_ms, tcm_handle_t *fds, int maxfds, int *nfds)
{
    uint8_t hdr[4];
    int err = tcm__recv_all(fd, hdr, 4, timeout_ms, fds, maxfds, nfds);
    if (err) {
        errno = -err;
        return NULL;
    }
    uint32_t n = tcm__frame_len(hdr);
    if (n > TCM_FRAME_MAX) {
        errno = EPROTO;
        return NULL;
    }
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        errno = ENOMEM;
        return NULL;
    }
    err = tcm__recv_all(fd, buf, n, timeout_ms, fds, maxfds, nfds);
    Tcm__Response *resp = err ? NULL : tcm__response__unpack(NULL, n, buf);
    free(buf);
    if (!resp)
        errno = err ? -err : EPROTO;
    return resp;
}

const char *tcm__default_socket(char *buf, size_t len)
{
    const char *env = getenv("TCM_SOCKET");
    if (env && *env) {
        snprintf(buf, len, "%s", env);
        return buf;
    }
    const char *rt = getenv("XDG_RUNTIME_DIR");
    if (rt && *rt)
        snprintf(buf, len, "%s/tcm/tcmd.sock", rt);
    else
        snprintf(buf, len, "/tmp/tcm-%u/tcmd.sock", tcm__login_uid());
    return buf;
}
