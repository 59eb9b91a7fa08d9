/* tcmd as a program: one daemon per socket and per name, owner-only socket
 * and segments, peers of another uid refused, tcmctl against it, clean
 * shutdown on SIGTERM. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "frame.h"
#include "tcm.h"
#include "tcm_layout.h" /* TCM_FRESH_ATTACH_MS */
#include "testutil.h"

static tcm_test_daemon_t daemon_;

static void test_second_daemon(void)
{
    const tcm_test_daemon_t *d = &daemon_;
    char cmd[1024], out[4096];
    /* same socket */
    snprintf(cmd, sizeof cmd, "%s --foreground --socket %s --name other%d 2>&1", TCMD_PATH, d->socket, (int)getpid());
    CHECK_EQ(tt_run(cmd, out, sizeof out), 1);
    CHECK(strstr(out, "already running") != NULL);
    /* same shm name on another socket */
    snprintf(cmd, sizeof cmd, "%s --foreground --socket %s.2 --name %s 2>&1", TCMD_PATH, d->socket, d->name);
    CHECK_EQ(tt_run(cmd, out, sizeof out), 1);
    /* bad arguments */
    snprintf(cmd, sizeof cmd, "%s --heap-size banana 2>&1", TCMD_PATH);
    CHECK_EQ(tt_run(cmd, out, sizeof out), 2);
    CHECK(tt_daemon_alive(d));
}

static void test_permissions(void)
{
    const tcm_test_daemon_t *d = &daemon_;
    struct stat st;
    CHECK_EQ(stat(d->socket, &st), 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK_EQ(st.st_mode & 077, 0);
    char path[256];
    snprintf(path, sizeof path, "/dev/shm/tcm.%s.heap", d->name);
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    snprintf(path, sizeof path, "/dev/shm/tcm.%s.meta", d->name);
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600);

    if (geteuid() != 0)
        return; /* needs root to become another user */
    chmod(d->socket, 0777); /* let the other user reach the daemon's check */
    pid_t pid = fork();
    if (pid == 0) {
        CHECK_EQ(setuid(65534), 0);
        /* another user may read... */
        Tcm__Request req = TCM__REQUEST__INIT;
        Tcm__Ping ping = TCM__PING__INIT;
        req.body_case = TCM__REQUEST__BODY_PING;
        req.ping = &ping;
        Tcm__Response *resp = tt_request(d, &req);
        CHECK_EQ(resp->body_case, TCM__RESPONSE__BODY_PONG);
        tcm__response__free_unpacked(resp, NULL);
        /* ...but not attach or change anything */
        Tcm__Hello hello = TCM__HELLO__INIT;
        hello.version = TCM_PROTO_VERSION;
        req.body_case = TCM__REQUEST__BODY_HELLO;
        req.hello = &hello;
        resp = tt_request(d, &req);
        CHECK_EQ(resp->body_case, TCM__RESPONSE__BODY_ERROR);
        CHECK_EQ(resp->error->code, EACCES);
        tcm__response__free_unpacked(resp, NULL);
        Tcm__ConfigSet set = TCM__CONFIG_SET__INIT;
        set.key = "log_level";
        set.value = "debug";
        req.body_case = TCM__REQUEST__BODY_CONFIG_SET;
        req.config_set = &set;
        resp = tt_request(d, &req);
        CHECK_EQ(resp->body_case, TCM__RESPONSE__BODY_ERROR);
        CHECK_EQ(resp->error->code, EACCES);
        CHECK(strstr(resp->error->message, "permission denied") != NULL);
        tcm__response__free_unpacked(resp, NULL);
        Tcm__Resize rs = TCM__RESIZE__INIT;
        rs.limit = 1 << 20;
        req.body_case = TCM__REQUEST__BODY_RESIZE;
        req.resize = &rs;
        resp = tt_request(d, &req);
        CHECK_EQ(resp->error->code, EACCES);
        tcm__response__free_unpacked(resp, NULL);
        _exit(0);
    }
    tt_wait_ok(pid, 10000);
    chmod(d->socket, 0700);
}

/* The number after "KEY": in a JSON text (the first such key); aborts if
 * there is none. */
static uint64_t json_number(const char *text, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *v = text ? strstr(text, quoted) : NULL;
    CHECK(v != NULL);
    return strtoull(v + strlen(quoted), NULL, 10);
}

static void test_tcmctl(void)
{
    const tcm_test_daemon_t *d = &daemon_;
    char cmd[512], out[16384];
    void *p = tcm_malloc(1 << 20); /* something to see */
    CHECK_EQ(tt_tcmctl(d, "ping", out, sizeof out), 0);
    CHECK(strstr(out, "alive") != NULL);
    CHECK_EQ(tt_tcmctl(d, "--json ping", out, sizeof out), 0);
    CHECK_EQ(json_number(out, "daemon_pid"), d->pid);

    CHECK_EQ(tt_tcmctl(d, "--json stats", out, sizeof out), 0);
    CHECK_GE(json_number(out, "bytes_clients"), 1 << 20);
    CHECK_EQ(tt_tcmctl(d, "stats", out, sizeof out), 0);
    CHECK(strstr(out, "bytes_committed") != NULL);

    CHECK_EQ(tt_tcmctl(d, "--json clients", out, sizeof out), 0);
    char want[64];
    snprintf(want, sizeof want, "\"pid\":%d,", (int)getpid());
    CHECK_GE(json_number(strstr(out, want), "bytes_held"), 1 << 20);
    CHECK_EQ(tt_tcmctl(d, "clients", out, sizeof out), 0);
    CHECK(strstr(out, "held") != NULL);

    /* exit codes: usage 2, cannot connect 3 */
    CHECK_EQ(tt_tcmctl(d, "frobnicate", out, sizeof out), 2);
    snprintf(cmd, sizeof cmd, "%s --socket /nonexistent/tcm.sock ping 2>&1", TCMCTL_PATH);
    CHECK_EQ(tt_run(cmd, out, sizeof out), 3);
    CHECK(strstr(out, "is tcmd running") != NULL);
    tcm_free(p);
}

static void test_no_daemon(void)
{
    /* a fresh process (a fork child would re-attach to its parent's daemon) */
    char helper[256];
    tt_path("tcm_test_helper", helper, sizeof helper);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("TCM_SOCKET", "/nonexistent/tcm.sock", 1);
        execl(helper, helper, "nodaemon", (char *)NULL);
        _exit(127);
    }
    tt_wait_ok(pid, 10000);
}

/* Runs a fresh process (never attached) against socket sock, expecting
 * tcm_init to fail with -err; its stderr (one line saying why) in out.
 * Returns how long it took in ms. */
static long fresh_attach_fails(const char *sock, int err, char *out, size_t len)
{
    char helper[256], cmd[768];
    tt_path("tcm_test_helper", helper, sizeof helper);
    snprintf(cmd, sizeof cmd, "TCM_SOCKET=%s %s nodaemon %d 2>&1", sock, helper, err);
    uint64_t t0 = tcm__now_ns();
    CHECK_EQ(tt_run(cmd, out, len), 0);
    return (long)((tcm__now_ns() - t0) / 1000000);
}

/* A stale socket file (tcmd gone, file left) or a listener that never
 * answers: a process that was never attached has nothing to wait for. It
 * used to wait reconnect_timeout (30 s) without a word; now it fails at
 * once (stale) or within TCM_FRESH_ATTACH_MS (silent), with one line. */
static void test_no_silent_wait(void)
{
    char sock[108], out[4096];
    snprintf(sock, sizeof sock, "/tmp/tcmtest-stale-%d.sock", (int)getpid());
    CHECK_EQ(tcm__socket_placeholder(sock), 0); /* bound, never listening: a dead tcmd's file */
    long ms = fresh_attach_fails(sock, ECONNREFUSED, out, sizeof out);
    CHECK_LT(ms, 10000);
    CHECK(strstr(out, "socket file is stale") != NULL);
    CHECK(strstr(out, "waiting") == NULL);
    unlink(sock);

    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    CHECK_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    CHECK_EQ(listen(lfd, 16), 0); /* takes connections, never answers */
    ms = fresh_attach_fails(sock, ETIMEDOUT, out, sizeof out);
    CHECK_GE(ms, TCM_FRESH_ATTACH_MS - 100);
    CHECK_LT(ms, TCM_FRESH_ATTACH_MS + 8000);
    CHECK(strstr(out, "did not answer") != NULL);
    close(lfd);
    unlink(sock);
}

static void test_detached_start(void)
{
    /* without --foreground tcmd detaches once it listens */
    char sock[108], cmd[512], out[4096];
    snprintf(sock, sizeof sock, "/tmp/tcmtest-bg-%d.sock", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s --socket %s --name bg%d --log /dev/null", TCMD_PATH, sock, (int)getpid());
    CHECK_EQ(tt_run(cmd, out, sizeof out), 0);
    int fd = tcm__connect(sock);
    CHECK_GE(fd, 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "%s --socket %s --json ping", TCMCTL_PATH, sock);
    CHECK_EQ(tt_run(cmd, out, sizeof out), 0);
    pid_t pid = (pid_t)strtol(strstr(out, "\"daemon_pid\":") + 13, NULL, 10);
    CHECK_GT(pid, 0);
    for (int i = 0; i < 500 && access(sock, F_OK) == 0; i++) {
        if (i % 300 == 0) /* again after 3 s: tt_terminate says why */
            CHECK_EQ(kill(pid, SIGTERM), 0);
        usleep(10000);
    }
    CHECK(access(sock, F_OK) != 0); /* socket removed on SIGTERM */
}

int main(void)
{
    tt_daemon_start(&daemon_, NULL);
    CHECK_EQ(tcm_init(daemon_.socket), 0);
    static const tt_case_t cases[] = {
        {"second daemon", test_second_daemon},
        {"permissions", test_permissions},
        {"tcmctl", test_tcmctl},
        {"no daemon", test_no_daemon},
        {"no silent wait", test_no_silent_wait},
        {"detached start", test_detached_start},
    };
    int failed = tt_run_cases("daemon", cases, sizeof cases / sizeof cases[0], 120000);
    tcm_shutdown();
    tt_daemon_stop(&daemon_); /* SIGTERM: exit 0, segments and socket gone */
    return failed != 0;
}
