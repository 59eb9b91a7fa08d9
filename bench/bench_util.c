/* bench_util.c — see bench_util.h. */
#define _GNU_SOURCE
#include "bench_util.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tcm.h"
#include "util.h"

#ifndef BENCH_SYSTEM_NAME
#define BENCH_SYSTEM_NAME "glibc"
#endif
#ifndef BENCH_SYSTEM_LIB
#define BENCH_SYSTEM_LIB "libc.so"
#endif

static const bench_alloc_t allocs[] = {
    {"tcm", tcm_malloc, tcm_free, tcm_calloc},
    {BENCH_SYSTEM_NAME, malloc, free, calloc},
};

const bench_alloc_t *bench_allocs(size_t *n)
{
    *n = sizeof allocs / sizeof allocs[0];
    return allocs;
}

size_t bench_pick_allocs(const char *list, size_t *idx, size_t max)
{
    size_t n = 0, all = sizeof allocs / sizeof allocs[0];
    if (strcmp(list, "all") == 0) {
        for (size_t i = 0; i < all && n < max; i++)
            idx[n++] = i;
        return n;
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < all && strcmp(allocs[i].name, tok) != 0)
            i++;
        if (i == all) {
            fprintf(stderr, "bench: allocator '%s' is not in this binary (it has: tcm, %s)\n", tok,
                    BENCH_SYSTEM_NAME);
            exit(2);
        }
        if (n < max)
            idx[n++] = i;
    }
    return n;
}

const bench_alloc_t *bench_alloc_named(const char *name)
{
    size_t nall, idx;
    const bench_alloc_t *all = bench_allocs(&nall);
    bench_pick_allocs(name, &idx, 1);
    return &all[idx];
}

void bench_check_system_malloc(void)
{
    Dl_info info;
    void *(*fp)(size_t) = malloc;
    if (!dladdr((void *)(uintptr_t)fp, &info) || !info.dli_fname ||
        !strstr(info.dli_fname, BENCH_SYSTEM_LIB)) {
        fprintf(stderr, "bench: malloc comes from %s, expected %s (%s): check the link line\n",
                info.dli_fname ? info.dli_fname : "?", BENCH_SYSTEM_LIB, BENCH_SYSTEM_NAME);
        abort();
    }
}

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static bool common_opt(int opt, const char *arg, bench_opts_t *o)
{
    switch (opt) {
    case BENCH_O_RUNS: o->runs = (int)bench_parse_size("--runs", arg); return true;
    case BENCH_O_CSV: o->csv = 1; return true;
    case BENCH_O_TCMD: o->tcmd = arg; return true;
    case BENCH_O_TCMD_ARG: bench_daemon_add_arg(arg); return true;
    case BENCH_O_TIMEOUT: o->timeout_s = (unsigned)bench_parse_size("--timeout", arg); return true;
    case BENCH_O_VERBOSE: o->verbose = 1; return true;
    default: return false;
    }
}

int bench_getopt(int argc, char **argv, const struct option *opts, bench_opts_t *o)
{
    int opt;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1 && common_opt(opt, optarg, o))
        ;
    return opt;
}

bool bench_runs_ok(const bench_opts_t *o)
{
    return o->runs >= 1 && o->runs <= BENCH_MAX_RUNS;
}

pid_t bench_fork(void)
{
    pid_t parent = getpid();
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("bench: fork");
        exit(1);
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        alarm(0);
    }
    return pid;
}

bench_stats_t bench_stats(const double *t, int n)
{
    double s[BENCH_MAX_RUNS];
    memcpy(s, t, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    bench_stats_t r = {.min = s[0], .max = s[n - 1]};
    r.median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    return r;
}

uint64_t bench_parse_size(const char *opt, const char *s)
{
    uint64_t v;
    if (tcm__parse_size(s, &v) != 0) { /* tcm's one size syntax: 4096, 64K, 64MiB, 1G */
        fprintf(stderr, "bench: bad value for %s: '%s'\n", opt, s);
        exit(2);
    }
    return v;
}

static int socket_accepts(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int ok = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

static char *extra_args[BENCH_DAEMON_MAX_ARGS];
static int n_extra_args;
static char tcmctl_path[PATH_MAX + 16];

void bench_daemon_add_arg(const char *arg)
{
    if (n_extra_args == BENCH_DAEMON_MAX_ARGS) {
        fprintf(stderr, "bench: more than %d extra tcmd arguments\n", BENCH_DAEMON_MAX_ARGS);
        exit(2);
    }
    extra_args[n_extra_args++] = (char *)arg;
}

void bench_daemon_clear_args(void)
{
    n_extra_args = 0;
}

static void spawn(bench_daemon_t *d)
{
    pid_t me = getpid();
    d->pid = fork();
    if (d->pid < 0) {
        perror("bench: fork");
        exit(1);
    }
    if (d->pid == 0) {
        /* never outlive the harness, even if it is killed */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != me)
            _exit(1);
        char *argv[8 + BENCH_DAEMON_MAX_ARGS + 1] = {"tcmd", "--foreground", "--socket", d->socket,
                                                     "--name", d->name, "--log-level", "warn"};
        int n = 8;
        for (int i = 0; i < n_extra_args; i++)
            argv[n++] = extra_args[i];
        /* and TCM_BENCH_TCMD_ARGS, words apart: a whole suite run with a
         * setting changed (huge_collapse_ms 0 against its default) */
        char *more = getenv("TCM_BENCH_TCMD_ARGS");
        for (char *w = more ? strtok(more, " ") : NULL; w && n < 8 + BENCH_DAEMON_MAX_ARGS; w = strtok(NULL, " "))
            argv[n++] = w;
        execv(d->tcmd, argv);
        fprintf(stderr, "bench: exec %s: %s\n", d->tcmd, strerror(errno));
        _exit(127);
    }
    for (int tries = 0;; tries++) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            fprintf(stderr, "bench: tcmd exited before listening (status 0x%x)\n", status);
            exit(1);
        }
        if (socket_accepts(d->socket))
            break;
        if (tries == 100000) {
            fprintf(stderr, "bench: tcmd did not listen on %s within 10 s\n", d->socket);
            bench_daemon_stop(d);
            exit(1);
        }
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000}, NULL);
    }
}

void bench_daemon_kill(bench_daemon_t *d)
{
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
}

double bench_daemon_restart(bench_daemon_t *d)
{
    double t0 = bench_now();
    spawn(d);
    return bench_now() - t0;
}

void bench_daemon_start(bench_daemon_t *d, const char *tcmd)
{
    char self[PATH_MAX], guess[PATH_MAX + 8];
    if (!tcmd) {
        /* the build puts bench binaries in BUILD/bench and tcmd in BUILD */
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = 0;
        char *slash = strrchr(self, '/');
        if (slash)
            *slash = 0;
        snprintf(guess, sizeof guess, "%s/../tcmd", self);
        tcmd = guess;
    }
    if (access(tcmd, X_OK) != 0) {
        fprintf(stderr, "bench: no tcmd at %s (pass --tcmd PATH)\n", tcmd);
        exit(1);
    }
    /* tcmctl lives next to tcmd in the build tree */
    snprintf(tcmctl_path, sizeof tcmctl_path, "%s", tcmd);
    char *cut = strrchr(tcmctl_path, '/');
    snprintf(cut ? cut + 1 : tcmctl_path, sizeof tcmctl_path - (size_t)(cut ? cut + 1 - tcmctl_path : 0), "tcmctl");
    static char path[PATH_MAX + 8];
    snprintf(path, sizeof path, "%s", tcmd);
    d->tcmd = path;
    snprintf(d->socket, sizeof d->socket, "/tmp/tcm-bench-%d.sock", (int)getpid());
    snprintf(d->name, sizeof d->name, "bench%d", (int)getpid());
    spawn(d);
    /* children after fork attach with tcm_init(NULL), which reads it */
    setenv("TCM_SOCKET", d->socket, 1);
    int rc = tcm_init(d->socket);
    if (rc != 0) {
        fprintf(stderr, "bench: tcm_init(%s): %s\n", d->socket, strerror(-rc));
        bench_daemon_stop(d);
        exit(1);
    }
}

void bench_daemon_stop(bench_daemon_t *d)
{
    if (d->pid <= 0)
        return;
    tcm_shutdown();
    kill(d->pid, SIGTERM);
    int status = 0;
    for (int tries = 0; waitpid(d->pid, &status, WNOHANG) != d->pid; tries++) {
        if (tries == 500) {
            /* a daemon that ignores SIGTERM is a bug worth seeing */
            fprintf(stderr, "bench: tcmd (pid %d) still running 5 s after SIGTERM; killing it\n", (int)d->pid);
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &status, 0);
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "bench: tcmd ended with status 0x%x\n", status);
    unlink(d->socket);
    d->pid = 0;
}

int64_t bench_daemon_query(const bench_daemon_t *d, const char *command, const char *key)
{
    char cmd[PATH_MAX + 256], out[8192], pat[128];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' --json %s 2>/dev/null", tcmctl_path, d->socket, command);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    if (pclose(f) != 0)
        return -1;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(out, pat);
    return at ? (int64_t)strtoll(at + strlen(pat), NULL, 10) : -1;
}

void bench_daemon_print(const bench_daemon_t *d, const char *command)
{
    char cmd[PATH_MAX + 256];
    snprintf(cmd, sizeof cmd, "'%s' --socket '%s' %s >&2", tcmctl_path, d->socket, command);
    if (system(cmd) != 0)
        fprintf(stderr, "bench: tcmctl %s failed\n", command);
}

int bench_batch_loop(const bench_alloc_t *a, size_t size, size_t batch, uint64_t pairs, void **scratch,
                     uintptr_t *sum)
{
    void *(*alloc)(size_t) = a->alloc;
    void (*release)(void *) = a->release;
    uintptr_t acc = 0;
    for (uint64_t done = 0; done < pairs;) {
        size_t n = pairs - done < batch ? (size_t)(pairs - done) : batch, got;
        for (got = 0; got < n; got++) {
            char *q = alloc(size);
            if (!q)
                break;
            q[0] = (char)got;
            acc += (uintptr_t)q;
            scratch[got] = q;
        }
        for (size_t i = 0; i < got; i++)
            release(scratch[i]);
        if (got < n)
            return -1;
        done += n;
    }
    *sum += acc;
    return 0;
}

static char timeout_msg[160];
static size_t timeout_len;

static void on_timeout(int sig)
{
    (void)sig;
    (void)!write(2, timeout_msg, timeout_len);
    _exit(3);
}

void bench_timeout_init(const char *what)
{
    int n = snprintf(timeout_msg, sizeof timeout_msg,
                     "bench: %s exceeded --timeout; it hangs or is far too slow\n", what);
    timeout_len = n < 0 ? 0 : (size_t)n < sizeof timeout_msg ? (size_t)n : sizeof timeout_msg - 1;
    signal(SIGALRM, on_timeout);
}

size_t bench_setup(const char *list, size_t *idx, size_t max, bench_daemon_t *daemon, const char *tcmd)
{
    size_t n = bench_pick_allocs(list, idx, max);
    bench_check_system_malloc();
    for (size_t k = 0; k < n; k++)
        if (strcmp(allocs[idx[k]].name, "tcm") == 0 && !daemon->pid)
            bench_daemon_start(daemon, tcmd);
    return n;
}
