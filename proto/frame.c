/* frame.c — framing for the control protocol. */
#define _GNU_SOURCE
#include "frame.h"
#include "prim.h"

#include <errno.h>
#include <stdbool.h>
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

/* What a set-user-ID process may attach to: the environment is its
 * caller's, so neither TCM_SOCKET, TCM_DAEMON_UID nor XDG_RUNTIME_DIR
 * count there; root's client configuration may name a socket and the uid
 * its tcmd runs as ("socket = PATH", "daemon_uid = N"). */
#ifndef TCM_CLIENT_CONF
#define TCM_CLIENT_CONF "/etc/tcm/client.conf"
#endif

/* key's value in root's client configuration (buf), or NULL. */
static const char *client_conf(const char *key, char *buf, size_t len)
{
    char text[1024];
    if (tcm__read_root_file(TCM_CLIENT_CONF, text, sizeof text) != 0)
        return NULL;
    size_t klen = strlen(key);
    for (char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        line += strspn(line, " \t");
        if (strncmp(line, key, klen) != 0)
            continue;
        char *v = line + klen;
        v += strspn(v, " \t");
        if (*v != '=')
            continue;
        v++;
        v += strspn(v, " \t");
        size_t n = strcspn(v, " \t\r\n#");
        if (!n || n >= len)
            return NULL;
        memcpy(buf, v, n);
        buf[n] = 0;
        return buf;
    }
    return NULL;
}

const char *tcm__runtime_socket(char *buf, size_t len)
{
    const char *rt = tcm__env("XDG_RUNTIME_DIR");
    if (rt && *rt)
        snprintf(buf, len, "%s/tcm/tcmd.sock", rt);
    else
        snprintf(buf, len, "/tmp/tcm-%u/tcmd.sock", tcm__login_uid());
    return buf;
}

const char *tcm__default_socket(char *buf, size_t len)
{
    const char *env = tcm__env("TCM_SOCKET");
    if (env && *env) {
        snprintf(buf, len, "%s", env);
        return buf;
    }
    if (tcm__secure_exec() && client_conf("socket", buf, len))
        return buf;
    return tcm__runtime_socket(buf, len);
}

/* The last refusal's text. Not per thread (libtcm is a malloc: no TLS that
 * might allocate); libtcm connects under a lock and tcmctl has one thread,
 * and a race could only mix two texts, never the verdict. */
static char refusal[256];

const char *tcm__server_refusal(void)
{
    return refusal;
}

/* Whether the directory of path is owned by uid and nobody else may add or
 * replace a file in it: then a socket there served by uid is uid's own. */
static bool dir_is_owned_by(const char *path, tcm_uid_t uid, char *dir, size_t len)
{
    snprintf(dir, len, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, len, ".");
    else
        slash[slash == dir] = 0; /* "/x.sock" is in "/" */
    tcm_uid_t owner;
    tcm_gid_t group;
    unsigned mode;
    return tcm__dir_stat(dir, &owner, &group, &mode) == 0 && owner == uid && !(mode & 022);
}

/* The rule (DESIGN.md, "Runtime directory"): the server must run as
 * $TCM_DAEMON_UID when that is set; otherwise as this process's user or
 * root, or, on a socket path given explicitly, as the user who owns the
 * socket's directory when only that user can write there (a service
 * account's /run/tcm with --allow-group). Never so on the built-in
 * runtime path, whose directory anyone may have made first. A set-user-ID
 * or set-group-ID process (whose caller may not read its memory) trusts
 * only root and the daemon_uid of root's client configuration. */
tcm_handle_t tcm__connect_server(const char *path)
{
    refusal[0] = 0;
    tcm_handle_t fd = tcm__connect(path);
    if (fd < 0)
        return fd;
    tcm_pid_t pid;
    tcm_uid_t server, self = tcm__uid();
    tcm_gid_t gid;
    int err = tcm__peer_cred(fd, &pid, &server, &gid);
    if (err) {
        tcm__close(fd);
        return err;
    }
    char dir[256], runtime[256], conf_uid[16];
    bool secure = tcm__secure_exec();
    const char *want = secure ? client_conf("daemon_uid", conf_uid, sizeof conf_uid) : tcm__env("TCM_DAEMON_UID");
    if (secure && server != 0 && (!want || strtoul(want, NULL, 10) != server)) {
        snprintf(refusal, sizeof refusal,
                 "tcmd there runs as uid %u (pid %d): a set-user-ID or set-group-ID process trusts only root and "
                 "the daemon_uid of " TCM_CLIENT_CONF, (unsigned)server, (int)pid);
    } else if (secure) {
        /* trusted as above */
    } else if (want && *want) {
        char *end;
        unsigned long v = strtoul(want, &end, 10);
        if (*end || v > UINT32_MAX)
            snprintf(refusal, sizeof refusal, "TCM_DAEMON_UID=%.40s is not a uid", want);
        else if (server != (tcm_uid_t)v)
            snprintf(refusal, sizeof refusal, "tcmd there runs as uid %u (pid %d), not as TCM_DAEMON_UID=%lu",
                     (unsigned)server, (int)pid, v);
    } else if (server != self && server != 0 &&
               (strcmp(path, tcm__runtime_socket(runtime, sizeof runtime)) == 0 ||
                !dir_is_owned_by(path, server, dir, sizeof dir))) {
        snprintf(refusal, sizeof refusal,
                 "tcmd there runs as uid %u (pid %d), not as this user (uid %u), root, or the sole owner of the "
                 "socket's directory; set TCM_DAEMON_UID=%u to trust it",
                 (unsigned)server, (int)pid, (unsigned)self, (unsigned)server);
    }
    if (refusal[0]) {
        tcm__close(fd);
        return -EPERM;
    }
    return fd;
}
