/* tcmd's runtime directory and files, and clients checking who serves the
 * socket (DESIGN.md, "Runtime directory"). Another user's directory where
 * tcmd would make its own, or one others may write to, stops tcmd with a
 * message naming it; a link or another user's file at the log path is
 * refused and what it points to is left alone; a socket served by a
 * process of another uid is refused by libtcm and tcmctl, naming that uid,
 * unless TCM_DAEMON_UID names it. And the ordinary cases still work: the
 * runtime directory created owner-only (group-searchable with
 * --allow-group), an existing own one reused, a socket straight in /tmp.
 * A set-user-ID program ignores the environment's choice of tcmd.
 * The runtime path is steered with XDG_RUNTIME_DIR into a private
 * directory, so that the real /tmp/tcm-0 is never touched. Needs root (to
 * act as nobody); skipped otherwise. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "frame.h"
#include "tcm.h"
#include "testutil.h"

#define NOBODY 65534

static char top[64]; /* this case's private directory, root's, 0755 */

static void make_top(void)
{
    snprintf(top, sizeof top, "/tmp/tcmtest-rt-%d-XXXXXX", (int)getpid());
    CHECK(mkdtemp(top) != NULL);
    CHECK_EQ(chmod(top, 0755), 0); /* nobody's tcmd must reach its own directory inside */
}

static void remove_top(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", top);
    CHECK_EQ(system(cmd), 0);
}

static void become_nobody(void)
{
    gid_t g = NOBODY;
    CHECK_EQ(setgroups(1, &g), 0);
    CHECK_EQ(setgid(NOBODY), 0);
    CHECK_EQ(setuid(NOBODY), 0);
}

/* Start tcmd with args (after --name NAME), as nobody if asked, with
 * XDG_RUNTIME_DIR set to xdg (unset when NULL) and no TCM_SOCKET; its
 * stdout and stderr go to out_path. */
static pid_t spawn_tcmd(const char *const *args, const char *xdg, bool nobody, const char *out_path)
{
    static int seq;
    char name[64];
    snprintf(name, sizeof name, "rt%d-%d", (int)getpid(), ++seq);
    const char *argv[24] = {TCMD_PATH, "--name", name};
    int argc = 3;
    for (int i = 0; args[i] && argc < 23; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int null = open("/dev/null", O_RDONLY);
        if (out < 0 || null < 0)
            _exit(126);
        dup2(null, 0);
        dup2(out, 1);
        dup2(out, 2);
        unsetenv("TCM_SOCKET");
        if (xdg)
            setenv("XDG_RUNTIME_DIR", xdg, 1);
        else
            unsetenv("XDG_RUNTIME_DIR");
        if (nobody)
            become_nobody();
        execv(TCMD_PATH, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static void read_file(const char *path, char *buf, size_t len)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = 0;
    fclose(f);
}

/* tcmd must refuse to start: exit status 1, and its message has each of
 * the words. */
static void expect_refusal(const char *const *args, const char *xdg, bool nobody, const char *const *words)
{
    char out_path[128], out[2048];
    snprintf(out_path, sizeof out_path, "%s.out", top);
    int st = tt_wait(spawn_tcmd(args, xdg, nobody, out_path), 20000);
    read_file(out_path, out, sizeof out);
    unlink(out_path);
    bool named = true;
    for (int i = 0; words[i]; i++)
        named = named && strstr(out, words[i]) != NULL;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1 || !named) {
        fprintf(stderr, "expected tcmd to refuse (status 0x%x), naming", st);
        for (int i = 0; words[i]; i++)
            fprintf(stderr, " '%s'", words[i]);
        fprintf(stderr, "; it said:\n%s\n", out);
        abort();
    }
}

static void wait_socket(const char *path, pid_t pid)
{
    for (int i = 0; i < 2000; i++) {
        int fd = tcm__connect(path);
        if (fd >= 0) {
            close(fd);
            return;
        }
        CHECK_EQ(waitpid(pid, NULL, WNOHANG), 0); /* tcmd still there */
        usleep(5000);
    }
    fprintf(stderr, "tcmd did not listen on %s\n", path);
    abort();
}

static void stop_tcmd(pid_t pid)
{
    int st = tt_terminate(pid, 60000); /* a sanitized tcmd on a box busy with other suites can take a while */
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static unsigned mode_of(const char *path, uid_t *uid, gid_t *gid)
{
    struct stat st;
    CHECK_EQ(lstat(path, &st), 0);
    if (uid)
        *uid = st.st_uid;
    if (gid)
        *gid = st.st_gid;
    return st.st_mode & 07777;
}

/* dir given to uid (and its group) with mode: tcmd (args, xdg) refuses
 * to start, naming dir, the uid and the mode. */
static void expect_dir_refused(const char *const *args, const char *xdg, const char *dir, uid_t uid, mode_t mode)
{
    CHECK_EQ(chown(dir, uid, uid), 0);
    CHECK_EQ(chmod(dir, mode), 0);
    char who[32], how[16];
    snprintf(who, sizeof who, "uid %u", (unsigned)uid);
    snprintf(how, sizeof how, "%04o", (unsigned)mode);
    const char *words[] = {dir, who, how, NULL};
    expect_refusal(args, xdg, false, words);
}

/* (a) The runtime directory: another user's, or one others may write to,
 * or a link, at $XDG_RUNTIME_DIR/tcm stops tcmd (the daemon that comes up
 * at the default path would serve the squatter's directory); so does
 * /tmp/tcm-UID made by someone else than tcmd's user. */
static void test_runtime_dir_refused(void)
{
    make_top();
    char dir[128], log[160], victim[128];
    snprintf(dir, sizeof dir, "%s/tcm", top);
    snprintf(log, sizeof log, "%s/tcmd.sock.log", dir);
    snprintf(victim, sizeof victim, "%s/victim", top);
    FILE *f = fopen(victim, "w");
    CHECK(f && fputs("untouched\n", f) >= 0 && fclose(f) == 0);

    /* nobody's, mode 777, with a link planted as the log */
    CHECK_EQ(mkdir(dir, 0777), 0);
    CHECK_EQ(symlink(victim, log), 0);
    const char *none[] = {NULL};
    expect_dir_refused(none, top, dir, NOBODY, 0777);
    char sock[160];
    snprintf(sock, sizeof sock, "%s/tcmd.sock", dir);
    CHECK(access(sock, F_OK) != 0);
    char text[64];
    read_file(victim, text, sizeof text);
    CHECK(strcmp(text, "untouched\n") == 0);

    /* nobody's, owner-only: still not tcmd's */
    CHECK_EQ(unlink(log), 0);
    expect_dir_refused(none, top, dir, NOBODY, 0700);

    /* tcmd's own user's, but anyone may write there */
    expect_dir_refused(none, top, dir, 0, 0777);

    /* a link to a directory of tcmd's own */
    CHECK_EQ(rmdir(dir), 0);
    char real[128];
    snprintf(real, sizeof real, "%s/real", top);
    CHECK_EQ(mkdir(real, 0700), 0);
    CHECK_EQ(symlink(real, dir), 0);
    const char *words4[] = {dir, "symbolic link", NULL};
    expect_refusal(none, top, false, words4);

    /* our own runtime directory in one another user could rename it out of */
    CHECK_EQ(unlink(dir), 0);
    char theirs[128];
    snprintf(theirs, sizeof theirs, "%s/theirs", top);
    CHECK_EQ(mkdir(theirs, 0700), 0);
    CHECK_EQ(chown(theirs, NOBODY, NOBODY), 0);
    const char *words6[] = {theirs, "parent", "uid 65534", NULL};
    expect_refusal(none, theirs, false, words6);

    /* without XDG_RUNTIME_DIR: /tmp/tcm-65534 made by root stops a tcmd
     * of nobody's (the real /tmp/tcm-0 stays untouched) */
    const char *tmpdir = "/tmp/tcm-65534";
    if (mkdir(tmpdir, 0700) == 0) {
        const char *words5[] = {tmpdir, "uid 0", NULL};
        expect_refusal(none, NULL, true, words5);
        CHECK_EQ(rmdir(tmpdir), 0);
    } else {
        printf("(/tmp/tcm-65534 exists already: that part skipped)\n");
    }
    remove_top();
}

/* An explicit --socket in a directory tcmd did not make: its user's or
 * root's, writable by others only if sticky. */
static void test_socket_dir_refused(void)
{
    make_top();
    char dir[128], sock[160], log[160];
    snprintf(dir, sizeof dir, "%s/q", top);
    snprintf(sock, sizeof sock, "%s/tcmd.sock", dir);
    snprintf(log, sizeof log, "%s.log", top);
    const char *args[] = {"--foreground", "--socket", sock, "--log", log, NULL};

    CHECK_EQ(mkdir(dir, 0755), 0);
    expect_dir_refused(args, NULL, dir, NOBODY, 0755);
    expect_dir_refused(args, NULL, dir, 0, 0777);

    /* sticky, like /tmp: nobody else can remove or rename tcmd's files */
    CHECK_EQ(chmod(dir, 01777), 0);
    pid_t pid = spawn_tcmd(args, NULL, false, "/dev/null");
    wait_socket(sock, pid);
    stop_tcmd(pid);
    unlink(log);
    remove_top();
}

/* (b) A link at the log path is refused, default SOCKET.log or --log, and
 * its target is left alone; so is another user's file; an own file is
 * appended to. */
static void test_log_refused(void)
{
    make_top();
    CHECK_EQ(chmod(top, 0700), 0);
    char sock[128], log[160], victim[128], text[4096];
    snprintf(sock, sizeof sock, "%s/tcmd.sock", top);
    snprintf(log, sizeof log, "%s.log", sock);
    snprintf(victim, sizeof victim, "%s/victim", top);
    FILE *f = fopen(victim, "w");
    CHECK(f && fputs("untouched\n", f) >= 0 && fclose(f) == 0);

    /* the default log of a tcmd going to the background */
    CHECK_EQ(symlink(victim, log), 0);
    const char *bg[] = {"--socket", sock, NULL};
    const char *words[] = {log, "symbolic link", NULL};
    expect_refusal(bg, NULL, false, words);
    /* --log */
    const char *fg[] = {"--foreground", "--socket", sock, "--log", log, NULL};
    expect_refusal(fg, NULL, false, words);
    read_file(victim, text, sizeof text);
    CHECK(strcmp(text, "untouched\n") == 0);
    CHECK(access(sock, F_OK) != 0);

    /* another user's file */
    CHECK_EQ(unlink(log), 0);
    f = fopen(log, "w");
    CHECK(f && fputs("nobody's\n", f) >= 0 && fclose(f) == 0);
    CHECK_EQ(chown(log, NOBODY, NOBODY), 0);
    const char *words2[] = {log, "uid 65534", NULL};
    expect_refusal(bg, NULL, false, words2);
    expect_refusal(fg, NULL, false, words2);
    read_file(log, text, sizeof text);
    CHECK(strcmp(text, "nobody's\n") == 0);

    /* an own file is appended to; a new one is owner-only */
    CHECK_EQ(chown(log, 0, 0), 0);
    pid_t pid = spawn_tcmd(fg, NULL, false, "/dev/null");
    wait_socket(sock, pid);
    stop_tcmd(pid);
    read_file(log, text, sizeof text);
    CHECK(strncmp(text, "nobody's\n", 9) == 0 && strstr(text, "ready") != NULL);
    CHECK_EQ(unlink(log), 0);
    pid = spawn_tcmd(fg, NULL, false, "/dev/null");
    wait_socket(sock, pid);
    stop_tcmd(pid);
    CHECK_EQ(mode_of(log, NULL, NULL), 0600u);
    remove_top();
}

static const char *g_sock;
static char g_err[160];

/* tcm_init in a process of its own, its stderr in g_err */
static int client_init(void *arg)
{
    int want = (int)(intptr_t)arg;
    CHECK(freopen(g_err, "w", stderr) != NULL);
    int rc = tcm_init(g_sock);
    fflush(stderr); /* the child leaves with _exit */
    if (rc != want) {
        fprintf(stdout, "tcm_init(%s) = %d, expected %d\n", g_sock, rc, want);
        return 1;
    }
    if (rc == 0) {
        void *p = tcm_malloc(100);
        CHECK(p != NULL);
        tcm_free(p);
        tcm_shutdown();
    }
    return 0;
}

static void expect_client(const char *sock, int want, const char *env)
{
    g_sock = sock;
    snprintf(g_err, sizeof g_err, "%s.err", top);
    if (env)
        putenv((char *)env);
    tt_wait_ok(tt_fork(client_init, (void *)(intptr_t)want), 20000);
    if (env)
        unsetenv("TCM_DAEMON_UID");
}

static void expect_err_names(const char *what)
{
    char text[1024];
    read_file(g_err, text, sizeof text);
    if (!strstr(text, what)) {
        fprintf(stderr, "expected '%s' in: %s\n", what, text);
        abort();
    }
}

/* tcmd as nobody (args name sock) on top/NAME/tcmd.sock, NAME a directory
 * of nobody's made with mode; returns its pid once the socket listens. */
static pid_t nobody_serves_in(const char *const *args, char *sock, size_t len, const char *name, mode_t mode)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", top, name);
    CHECK_EQ(mkdir(dir, mode), 0);
    CHECK_EQ(chown(dir, NOBODY, NOBODY), 0);
    snprintf(sock, len, "%s/tcmd.sock", dir);
    pid_t pid = spawn_tcmd(args, NULL, true, "/dev/null");
    wait_socket(sock, pid);
    return pid;
}

/* (c) A socket served by nobody at a path root uses: libtcm's tcm_init
 * and tcmctl refuse it, naming the uid, unless TCM_DAEMON_UID names it;
 * on the runtime path even when nobody owns the directory. */
static void test_wrong_server(void)
{
    make_top();
    char sock[192], out[2048], cmd[512];
    /* straight in /tmp, as the tests' sockets are: tcmd's directory rule lets nobody serve there */
    snprintf(sock, sizeof sock, "%s.sock", top);
    const char *args[] = {"--foreground", "--socket", sock, "--log", "/dev/null", NULL};
    pid_t pid = spawn_tcmd(args, NULL, true, "/dev/null");
    wait_socket(sock, pid);

    expect_client(sock, -EPERM, NULL);
    expect_err_names("uid 65534");
    expect_err_names("TCM_DAEMON_UID=65534");
    snprintf(cmd, sizeof cmd, "env -u TCM_DAEMON_UID %s --socket %s ping 2>&1", TCMCTL_PATH, sock);
    int rc = tt_run(cmd, out, sizeof out);
    if (rc != 3 || !strstr(out, "uid 65534") || !strstr(out, sock)) {
        fprintf(stderr, "tcmctl: %d: %s\n", rc, out);
        abort();
    }
    /* the override */
    snprintf(cmd, sizeof cmd, "TCM_DAEMON_UID=65534 %s --socket %s ping 2>&1", TCMCTL_PATH, sock);
    CHECK_EQ(tt_run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "TCM_DAEMON_UID=1 %s --socket %s ping 2>&1", TCMCTL_PATH, sock);
    CHECK_EQ(tt_run(cmd, out, sizeof out), 3);
    expect_client(sock, 0, "TCM_DAEMON_UID=65534");
    stop_tcmd(pid);

    /* an explicit path in a directory only nobody may write to: nobody's server is the directory's */
    pid = nobody_serves_in(args, sock, sizeof sock, "svc", 0755);
    expect_client(sock, 0, NULL);
    stop_tcmd(pid);

    /* but not on the runtime path, whose directory anyone could have made first */
    pid = nobody_serves_in(args, sock, sizeof sock, "tcm", 0700);
    snprintf(cmd, sizeof cmd, "env -u TCM_SOCKET -u TCM_DAEMON_UID XDG_RUNTIME_DIR=%s %s ping 2>&1", top,
             TCMCTL_PATH);
    rc = tt_run(cmd, out, sizeof out);
    if (rc != 3 || !strstr(out, "uid 65534")) {
        fprintf(stderr, "tcmctl on the runtime path: %d: %s\n", rc, out);
        abort();
    }
    setenv("XDG_RUNTIME_DIR", top, 1);
    unsetenv("TCM_SOCKET");
    g_sock = NULL; /* the default */
    snprintf(g_err, sizeof g_err, "%s.err", top);
    tt_wait_ok(tt_fork(client_init, (void *)(intptr_t)-EPERM), 20000);
    expect_err_names("uid 65534");
    stop_tcmd(pid);
    unlink(g_err);
    remove_top();
}

/* (d) The runtime directory made owner-only, reused once made, and made
 * group-searchable (group set) with --allow-group; a socket straight in
 * /tmp as before. */
static void test_normal(void)
{
    make_top();
    char dir[128], sock[160], cmd[512], out[2048];
    snprintf(dir, sizeof dir, "%s/tcm", top);
    snprintf(sock, sizeof sock, "%s/tcmd.sock", dir);
    const char *fg[] = {"--foreground", NULL};
    for (int round = 0; round < 2; round++) { /* made, then found */
        pid_t pid = spawn_tcmd(fg, top, false, "/dev/null");
        wait_socket(sock, pid);
        uid_t uid;
        CHECK_EQ(mode_of(dir, &uid, NULL), 0700u);
        CHECK_EQ(uid, 0u);
        snprintf(cmd, sizeof cmd, "env -u TCM_SOCKET XDG_RUNTIME_DIR=%s %s ping 2>&1", top, TCMCTL_PATH);
        CHECK_EQ(tt_run(cmd, out, sizeof out), 0);
        stop_tcmd(pid);
    }
    CHECK_EQ(rmdir(dir), 0);

    const char *group[] = {"--foreground", "--allow-group", "65534", NULL};
    pid_t pid = spawn_tcmd(group, top, false, "/dev/null");
    wait_socket(sock, pid);
    gid_t gid;
    CHECK_EQ(mode_of(dir, NULL, &gid), 0710u);
    CHECK_EQ(gid, (gid_t)NOBODY);
    /* a member of the group reaches root's tcmd: root is always trusted */
    snprintf(cmd, sizeof cmd, "setpriv --reuid 65534 --regid 65534 --clear-groups %s --socket %s ping 2>&1",
             TCMCTL_PATH, sock);
    CHECK_EQ(tt_run(cmd, out, sizeof out), 0);
    stop_tcmd(pid);

    snprintf(sock, sizeof sock, "%s.sock", top);
    const char *tmp[] = {"--foreground", "--socket", sock, NULL};
    pid = spawn_tcmd(tmp, NULL, false, "/dev/null");
    wait_socket(sock, pid);
    expect_client(sock, 0, NULL);
    stop_tcmd(pid);
    unlink(g_err);
    remove_top();
}

/* (e) A set-user-ID program linked with libtcm, run by nobody: the
 * environment (TCM_SOCKET, TCM_DAEMON_UID) is nobody's, so it counts for
 * nothing, and a socket nobody serves is refused even on a path the
 * program names; root's tcmd is still served. The same program without
 * the set-user-ID bit attaches to nobody's tcmd as before. (The tree
 * before read TCM_SOCKET with getenv: a user pointed a set-uid-root
 * program at their own tcmd and read its allocations from the heap.) */
static int probe(const char *sock)
{
    int rc = tcm_init(sock && *sock ? sock : NULL);
    printf("%d\n", rc);
    return 0;
}

/* Runs copy (a copy of this program) as nobody with the environment
 * naming nobody's tcmd at env_sock; its tcm_init(arg) result. */
static int run_probe(const char *copy, const char *env_sock, const char *arg)
{
    int pipefd[2];
    CHECK_EQ(pipe(pipefd), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], 1);
        become_nobody();
        setenv("TCM_SOCKET", env_sock, 1);
        setenv("TCM_DAEMON_UID", "65534", 1);
        execl(copy, copy, "probe", arg, (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    char buf[32] = {0};
    CHECK(read(pipefd[0], buf, sizeof buf - 1) > 0);
    close(pipefd[0]);
    tt_wait_ok(pid, 20000);
    return atoi(buf);
}

static void test_setuid(void)
{
    make_top();
    char sock[192], rsock[192], plain[160], suid[160], cmd[1024], out[256];
    const char *args[] = {"--foreground", "--socket", sock, "--log", "/dev/null", NULL};
    pid_t pid = nobody_serves_in(args, sock, sizeof sock, "svc", 0755);
    snprintf(rsock, sizeof rsock, "%s.root.sock", top);
    const char *rargs[] = {"--foreground", "--socket", rsock, "--log", "/dev/null", NULL};
    pid_t rpid = spawn_tcmd(rargs, NULL, false, "/dev/null");
    wait_socket(rsock, rpid);
    snprintf(plain, sizeof plain, "%s/probe", top);
    snprintf(suid, sizeof suid, "%s/probe-suid", top);
    snprintf(cmd, sizeof cmd, "cp /proc/%d/exe %s && cp %s %s && chmod 0755 %s && chmod 04755 %s", (int)getpid(),
             plain, plain, suid, plain, suid);
    CHECK_EQ(tt_run(cmd, out, sizeof out), 0);
    CHECK_EQ(run_probe(plain, sock, ""), 0);     /* nobody's own program: the environment's tcmd */
    CHECK(run_probe(suid, sock, "") != 0);       /* set-uid: TCM_SOCKET is not its own */
    CHECK_EQ(run_probe(suid, sock, sock), -EPERM); /* nor TCM_DAEMON_UID: nobody's tcmd refused */
    CHECK_EQ(run_probe(suid, sock, rsock), 0);   /* root's tcmd, on the path the program names */
    stop_tcmd(pid);
    stop_tcmd(rpid);
    remove_top();
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "probe") == 0)
        return probe(argc > 2 ? argv[2] : NULL);
    if (geteuid() != 0) {
        printf("runtime: skipped (needs root to act as another user)\n");
        return 77;
    }
    static const tt_case_t cases[] = {
        {"(a) another user's runtime directory", test_runtime_dir_refused},
        {"an explicit socket's directory", test_socket_dir_refused},
        {"(b) a link or another user's file at the log path", test_log_refused},
        {"(c) a server of another uid", test_wrong_server},
        {"(d) own, existing and --allow-group directories", test_normal},
        {"(e) a set-user-ID program", test_setuid},
    };
    return tt_run_cases("runtime", cases, sizeof cases / sizeof cases[0], 120000) != 0;
}
