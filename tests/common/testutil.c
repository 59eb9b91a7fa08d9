/* testutil.c — see testutil.h. */
#define _GNU_SOURCE
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>

#include "check.h"
#include "frame.h"
#include "tcm.h"
#include "tcm_layout.h"

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* A seccomp filter on this process and what it execs: pidfd_open fails
 * with EPERM and getsockopt(SO_PEERPIDFD) with ENOPROTOOPT (a kernel
 * before 6.5), everything else is allowed. */
static void refuse_pidfd_open(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getsockopt, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])), /* optname (low word) */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 77 /* SO_PEERPIDFD */, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOPROTOOPT & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        _exit(126);
}

static pid_t spawn_daemon(tcm_test_daemon_t *d, const char *const *extra, const char *const *env)
{
    const char *argv[32] = {TCMD_PATH, "--foreground", "--socket", d->socket, "--name", d->name,
                            "--log", d->log, "--log-level", "debug"};
    int argc = 10;
    for (int i = 0; extra && extra[i] && argc < 31; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* the daemon dies with the test, and never holds ctest's pipes */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
        for (int i = 0; env && env[i]; i++) {
            if (strcmp(env[i], TT_NO_PIDFD) == 0)
                refuse_pidfd_open();
            else
                putenv((char *)env[i]);
        }
        execv(TCMD_PATH, (char *const *)argv);
        perror("execv tcmd");
        _exit(127);
    }
    return pid;
}

static void wait_listening(tcm_test_daemon_t *d)
{
    for (int i = 0; i < 1000; i++) {
        int fd = tcm__connect(d->socket);
        if (fd >= 0) {
            close(fd);
            setenv("TCM_SOCKET", d->socket, 1);
            return;
        }
        int st;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            fprintf(stderr, "tcmd exited during start (status %d); log %s:\n", st, d->log);
            char cmd[200];
            snprintf(cmd, sizeof cmd, "tail -20 %s >&2", d->log);
            (void)!system(cmd);
            abort();
        }
        sleep_ms(10);
    }
    fprintf(stderr, "tcmd did not start listening on %s\n", d->socket);
    abort();
}

void tt_daemon_start(tcm_test_daemon_t *d, const char *const *extra)
{
    tt_daemon_start_env(d, extra, NULL);
}

/* What the daemons a test started leave in /tmp where one was killed
 * rather than stopped (its socket, its restart hint SOCKET.heap, its log):
 * removed when the test exits normally (a failing one aborts and keeps
 * them to read); a forked child's exit leaves its parent's alone. */
static int daemons_started; /* by this process: its daemons' sequence numbers */
static pid_t daemons_owner;

/* /tmp/tcmtest-PID-SEQ.KIND: daemon SEQ of test process PID */
static void run_path(char *buf, size_t len, pid_t pid, int seq, const char *kind)
{
    snprintf(buf, len, "/tmp/tcmtest-%d-%d.%s", (int)pid, seq, kind);
}

static void remove_leftovers(void)
{
    static const char *const kinds[] = {"sock", "sock.heap", "log"};
    if (getpid() != daemons_owner)
        return;
    for (int seq = 1; seq <= daemons_started; seq++)
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            char path[96];
            run_path(path, sizeof path, daemons_owner, seq, kinds[k]);
            unlink(path);
        }
}

void tt_daemon_start_env(tcm_test_daemon_t *d, const char *const *extra, const char *const *env)
{
    if (daemons_owner != getpid()) {
        daemons_owner = getpid();
        daemons_started = 0;
        atexit(remove_leftovers);
    }
    int seq = ++daemons_started;
    run_path(d->socket, sizeof d->socket, getpid(), seq, "sock");
    snprintf(d->name, sizeof d->name, "test%d-%d", (int)getpid(), seq);
    run_path(d->log, sizeof d->log, getpid(), seq, "log");
    d->pid = spawn_daemon(d, extra, env);
    wait_listening(d);
}

void tt_daemon_restart(tcm_test_daemon_t *d, const char *const *extra, const char *const *env)
{
    d->pid = spawn_daemon(d, extra, env);
    wait_listening(d);
}

int tt_daemon_run_fail(tcm_test_daemon_t *d, const char *const *extra, char *out, size_t outlen)
{
    return tt_daemon_run_fail_env(d, extra, NULL, out, outlen);
}

int tt_daemon_run_fail_env(tcm_test_daemon_t *d, const char *const *extra, const char *const *env, char *out,
                           size_t outlen)
{
    unlink(d->log);
    pid_t pid = spawn_daemon(d, extra, env);
    int st = tt_wait(pid, 20000);
    out[0] = 0;
    FILE *f = fopen(d->log, "r");
    if (f) {
        size_t n = fread(out, 1, outlen - 1, f);
        out[n] = 0;
        fclose(f);
    }
    return st;
}

void tt_state_read(const tcm_test_daemon_t *d, tcm_state_hdr_t *st)
{
    char path[160];
    snprintf(path, sizeof path, "/dev/shm/tcm.%s.state", d->name);
    int fd = open(path, O_RDONLY);
    CHECK_GE(fd, 0);
    CHECK_EQ(pread(fd, st, sizeof *st, 0), (ssize_t)sizeof *st);
    close(fd);
}

void tt_state_as_previous(const tcm_test_daemon_t *d)
{
    tcm_state_hdr_t st;
    tt_state_read(d, &st);
    st.version = 14;
    st.born_version = 0;
    memset(st.served_by, 0, sizeof st.served_by);
    char path[160];
    snprintf(path, sizeof path, "/dev/shm/tcm.%s.state", d->name);
    int fd = open(path, O_WRONLY);
    CHECK_GE(fd, 0);
    /* the header up to the page intent: what layout 14 and 15 tell apart */
    CHECK_EQ(pwrite(fd, &st, offsetof(tcm_state_hdr_t, page), 0), (ssize_t)offsetof(tcm_state_hdr_t, page));
    /* and their size: they end where 16's huge-range hint begins */
    tcm_state_layout_t sl;
    tcm__state_layout(&sl, st.npages);
    CHECK_EQ(ftruncate(fd, (off_t)sl.off_huge), 0);
    close(fd);
}

void *tt_previous_heap(tcm_test_daemon_t *d, const char *root, size_t size, int byte)
{
    tt_daemon_start(d, NULL);
    CHECK_EQ(tcm_init(d->socket), 0);
    void *p = tcm_malloc(size);
    CHECK(p != NULL);
    memset(p, byte, size);
    CHECK_EQ(tcm_root_set(root, p), 0);
    tcm_shutdown();
    tt_daemon_kill(d);
    tt_state_as_previous(d);
    return p;
}

void tt_take_root(const char *root, const void *p, size_t size, int byte)
{
    unsigned char *q = tcm_root_get(root);
    CHECK(q == p);
    for (size_t i = 0; i < size; i++)
        CHECK_EQ(q[i], (unsigned char)byte);
    CHECK_EQ(tcm_root_set(root, NULL), 0);
    tcm_free(q);
}

void tt_daemon_kill(tcm_test_daemon_t *d)
{
    CHECK_EQ(kill(d->pid, SIGKILL), 0);
    int st;
    CHECK_EQ(waitpid(d->pid, &st, 0), d->pid);
    CHECK(WIFSIGNALED(st));
}

int tt_daemon_wait_exit(tcm_test_daemon_t *d, int timeout_ms)
{
    return tt_wait(d->pid, timeout_ms);
}

bool tt_segment_exists(const tcm_test_daemon_t *d, const char *suffix)
{
    char path[160];
    snprintf(path, sizeof path, "/dev/shm/tcm.%s.%s", d->name, suffix);
    return access(path, F_OK) == 0;
}

bool tt_log_contains(const tcm_test_daemon_t *d, const char *what)
{
    FILE *f = fopen(d->log, "r");
    if (!f)
        return false;
    size_t cap = 1 << 16, n = 0;
    char *log = malloc(cap);
    for (size_t got; log && (got = fread(log + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap)
            log = realloc(log, cap *= 2);
    }
    fclose(f);
    if (!log)
        return false;
    log[n] = 0;
    bool found = strstr(log, what) != NULL;
    if (!found)
        fprintf(stderr, "tcmd's log has no \"%s\":\n%s\n", what, log);
    free(log);
    return found;
}

int tt_run(const char *cmd, char *out, size_t outlen)
{
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int tt_tcmctl(const tcm_test_daemon_t *d, const char *args, char *out, size_t outlen)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --socket %s %s 2>&1", TCMCTL_PATH, d->socket, args);
    return tt_run(cmd, out, outlen);
}

bool tt_daemon_alive(const tcm_test_daemon_t *d)
{
    if (kill(d->pid, 0) != 0)
        return false;
    if (waitpid(d->pid, NULL, WNOHANG) == 0)
        return true;
    if (errno != ECHILD)
        return false;
    /* a test case's process (tt_run_cases) is not tcmd's parent: a zombie
     * still answers kill 0 */
    char path[64], stat[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)d->pid);
    FILE *f = fopen(path, "r");
    bool alive = f && fgets(stat, sizeof stat, f) && strchr(stat, ')') && strchr(stat, ')')[2] != 'Z';
    if (f)
        fclose(f);
    return alive;
}

/* What tcmd said before a check fails: the test's output is all a CI
 * run keeps. */
static void log_tail(const tcm_test_daemon_t *d, const char *why)
{
    fprintf(stderr, "%s; tcmd's log (%s), its last lines:\n", why, d->log);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tail -40 %s >&2", d->log);
    (void)!system(cmd);
}

void tt_check_all_back(const tcm_test_daemon_t *d)
{
    CHECK_EQ(tt_wait_stat(d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(d, "bytes_clients"), 0);
    if (tt_stat(d, "refused"))
        log_tail(d, "refused requests");
    CHECK_EQ(tt_stat(d, "refused"), 0);
    CHECK_EQ(tt_stat(d, "clients_died"), 0);
    CHECK_EQ(tt_stat(d, "bytes_orphaned"), 0);
}

void tt_check_heap(const tcm_test_daemon_t *d)
{
    char out[2048];
    if (tt_tcmctl(d, "check", out, sizeof out) == 0)
        return;
    fprintf(stderr, "tcmctl check: %s\n", out);
    log_tail(d, "the check failed");
    abort();
}

void tt_daemon_stop(tcm_test_daemon_t *d)
{
    CHECK(tt_daemon_alive(d));
    tt_check_heap(d); /* every test that stops its daemon ends with the whole-heap validator */
    int st = tt_terminate(d->pid, 10000);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "tcmd did not exit cleanly (status 0x%x); log follows\n", st);
        char cmd[200];
        snprintf(cmd, sizeof cmd, "tail -30 %s >&2", d->log);
        (void)!system(cmd);
        abort();
    }
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/tcm.%s.heap", d->name);
    CHECK(access(path, F_OK) != 0); /* segments unlinked */
    CHECK(access(d->socket, F_OK) != 0);
    unlink(d->log);
}

Tcm__Response *tt_request(const tcm_test_daemon_t *d, Tcm__Request *req)
{
    int fd = tcm__connect(d->socket);
    CHECK(fd >= 0);
    req->version = TCM_PROTO_VERSION;
    CHECK_EQ(tcm__frame_send(fd, req), 0);
    Tcm__Response *resp = tcm__frame_recv(fd, 10000);
    CHECK(resp != NULL);
    close(fd);
    return resp;
}

uint64_t tt_stat(const tcm_test_daemon_t *d, const char *name)
{
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__StatsRequest sr = TCM__STATS_REQUEST__INIT;
    req.body_case = TCM__REQUEST__BODY_STATS;
    req.stats = &sr;
    Tcm__Response *resp = tt_request(d, &req);
    CHECK_EQ(resp->body_case, TCM__RESPONSE__BODY_STATS);
    for (size_t i = 0; i < resp->stats->n_stat; i++)
        if (strcmp(resp->stats->stat[i]->name, name) == 0) {
            uint64_t v = resp->stats->stat[i]->value;
            tcm__response__free_unpacked(resp, NULL);
            return v;
        }
    fprintf(stderr, "no stat named %s\n", name);
    abort();
}

uint64_t tt_wait_stat(const tcm_test_daemon_t *d, const char *name, uint64_t want, int timeout_ms)
{
    uint64_t v = 0;
    for (int t = 0; t <= timeout_ms; t += 10) {
        if ((v = tt_stat(d, name)) == want)
            break;
        sleep_ms(10);
    }
    return v;
}

int tt_clients(const tcm_test_daemon_t *d, pid_t pid, uint64_t *held, uint64_t *cached, uint32_t *threads)
{
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__ClientsRequest cr = TCM__CLIENTS_REQUEST__INIT;
    req.body_case = TCM__REQUEST__BODY_CLIENTS;
    req.clients = &cr;
    Tcm__Response *resp = tt_request(d, &req);
    CHECK_EQ(resp->body_case, TCM__RESPONSE__BODY_CLIENTS);
    int n = (int)resp->clients->n_client;
    for (int i = 0; i < n; i++) {
        const Tcm__ClientInfo *c = resp->clients->client[i];
        if ((pid_t)c->pid == pid) {
            if (held)
                *held = c->bytes_held;
            if (cached)
                *cached = c->bytes_cached;
            if (threads)
                *threads = c->threads;
        }
    }
    tcm__response__free_unpacked(resp, NULL);
    return n;
}

pid_t tt_fork(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* a test that fails must not leave its children running (they would
         * hold ctest's pipes until its timeout) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        _exit(fn(arg));
    }
    return pid;
}

int tt_wait(pid_t pid, int timeout_ms)
{
    bool timed_out;
    int st = tt_wait_timed(pid, timeout_ms, &timed_out);
    if (timed_out) {
        fprintf(stderr, "child %d timed out after %d ms; killed it\n", (int)pid, timeout_ms);
        abort();
    }
    return st;
}

/* Sent again every TERM_AGAIN_MS: under ThreadSanitizer, whose runtime
 * holds a signal back until the thread's next intercepted call, a SIGTERM
 * in a few dozen runs on a loaded box was taken by its handler and never
 * reached tcmd's (tcmd went on serving, its loop in epoll_wait with a 1 s
 * timeout, nothing pending; integration.runtime and `gdb` on the stuck
 * tcmd, 2026-12-06). tcmd's handler stays installed until it exits, and
 * one more SIGTERM only stops its loop again. */
#define TERM_AGAIN_MS 3000

int tt_terminate(pid_t pid, int timeout_ms)
{
    int st, left = timeout_ms;
    for (; left > TERM_AGAIN_MS; left -= TERM_AGAIN_MS) {
        CHECK_EQ(kill(pid, SIGTERM), 0);
        for (int t = 0; t < TERM_AGAIN_MS; t += 5) {
            pid_t r = waitpid(pid, &st, WNOHANG);
            CHECK(r >= 0);
            if (r == pid)
                return st;
            usleep(5000);
        }
    }
    CHECK_EQ(kill(pid, SIGTERM), 0);
    return tt_wait(pid, left);
}

void tt_wait_ok(pid_t pid, int timeout_ms)
{
    int st = tt_wait(pid, timeout_ms);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "child %d failed: %s %d\n", (int)pid, WIFEXITED(st) ? "exit" : "signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        abort();
    }
}

/* The state letter of /proc/PID/task/TID/stat (after the command's ')'),
 * or 0 when the thread is gone. */
static char thread_state(pid_t pid, const char *tid)
{
    char path[300], line[512]; /* tid: a directory entry name */
    snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid, tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    const char *end = got ? strrchr(line, ')') : NULL;
    return end && end[1] == ' ' ? end[2] : 0;
}

/* Whether every thread of pid is in one of the states listed (stat's
 * state letters). */
static bool threads_all_in(pid_t pid, const char *states)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *dir = opendir(path);
    if (!dir)
        return false;
    bool all = true;
    struct dirent *e;
    while (all && (e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char st = thread_state(pid, e->d_name);
        all = st && strchr(states, st);
    }
    closedir(dir);
    return all;
}

static bool wait_threads_all_in(pid_t pid, const char *states, int timeout_ms)
{
    for (int t = 0; t <= timeout_ms; t += 2) {
        if (threads_all_in(pid, states))
            return true;
        sleep_ms(2);
    }
    return false;
}

bool tt_wait_threads_asleep(pid_t pid, int timeout_ms)
{
    return wait_threads_all_in(pid, "SD", timeout_ms);
}

bool tt_stop(pid_t pid, int timeout_ms)
{
    if (kill(pid, SIGSTOP) != 0)
        return false;
    if (wait_threads_all_in(pid, "T", timeout_ms))
        return true;
    kill(pid, SIGCONT); /* a failed check must not leave it stopped for the cases after */
    return false;
}

const char *tt_path(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", TESTS_BIN_DIR, name);
    return buf;
}

