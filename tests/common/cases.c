/* cases.c — the test-case runner (cases.h). */
#define _GNU_SOURCE
#include "cases.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void report(const tt_case_t *c, bool ok, bool timed_out, int signal, int status, int timeout_ms)
{
    if (ok)
        printf("ok   %s\n", c->name);
    else if (timed_out)
        printf("FAIL %s: timed out after %d ms (killed; the next case runs)\n", c->name, timeout_ms);
    else if (signal)
        printf("FAIL %s: killed by signal %d\n", c->name, signal);
    else
        printf("FAIL %s: exit status %d\n", c->name, status);
}

static void run_case(const tt_case_t *c)
{
    if (c->fn_arg)
        c->fn_arg(c->arg);
    else
        c->fn();
}

static const tt_case_t *find_case(const tt_case_t *cases, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(cases[i].name, name) == 0)
            return &cases[i];
    return NULL;
}

static bool is_named(const char *name, char *const *names, int nnames)
{
    for (int a = 0; a < nnames; a++)
        if (strcmp(names[a], name) == 0)
            return true;
    return nnames == 0;
}

#ifdef _WIN32
#include "spawn.h"

/* No fork: each case is this program again, told which case to run. */
static bool run_one(const tt_case_t *c, int timeout_ms)
{
    tt_proc_t p;
    bool timed_out = false;
    int status = tt_spawn_self("case", c->name, &p) == 0 ? tt_proc_wait(p, timeout_ms, &timed_out) : 127;
    report(c, status == 0, timed_out, 0, status, timeout_ms);
    return status == 0;
}

#else
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int tt_wait_timed(pid_t pid, int timeout_ms, bool *timed_out)
{
    int st;
    *timed_out = false;
    for (int t = 0; t < timeout_ms; t += 5) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0) {
            perror("waitpid");
            abort();
        }
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    *timed_out = true;
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return st;
}

static bool run_one(const tt_case_t *c, int timeout_ms)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        abort();
    }
    if (pid == 0) {
        /* a process group of its own: what a failed case leaves running (a
         * tcmd, workers, a helper started by system()) goes with it */
        setpgid(0, 0);
        run_case(c);
        exit(0); /* exit, not _exit: the library's exit handler gives the caches back */
    }
    setpgid(pid, pid); /* (from this side too: the group exists before it may be killed) */
    bool timed_out;
    int st = tt_wait_timed(pid, timeout_ms, &timed_out);
    bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok)
        kill(-pid, SIGKILL);
    report(c, ok, timed_out, WIFSIGNALED(st) ? WTERMSIG(st) : 0, WIFEXITED(st) ? WEXITSTATUS(st) : 0, timeout_ms);
    return ok;
}
#endif

int tt_run_named_cases(const char *suite, const tt_case_t *cases, size_t n, int timeout_ms, char *const *names,
                       int nnames)
{
#ifdef _WIN32
    const char *role = tt_role();
    if (role && strcmp(role, "case") == 0) {
        const tt_case_t *c = find_case(cases, n, tt_role_arg());
        if (!c) {
            fprintf(stderr, "no case named '%s'\n", tt_role_arg());
            exit(2); /* a case that did not run has not passed */
        }
        run_case(c);
        exit(0);
    }
#endif
    int ran = 0, failed = 0;
    for (int a = 0; a < nnames; a++)
        if (!find_case(cases, n, names[a])) {
            printf("FAIL %s: %s has no case of that name\n", names[a], suite);
            ran++, failed++; /* a case that did not run has not passed */
        }
    for (size_t i = 0; i < n; i++) {
        if (!is_named(cases[i].name, names, nnames))
            continue;
        ran++;
        failed += !run_one(&cases[i], timeout_ms);
    }
    printf("%s: %d passed, %d failed\n", suite, ran - failed, failed);
    return failed;
}

int tt_run_cases(const char *suite, const tt_case_t *cases, size_t n, int timeout_ms)
{
    return tt_run_named_cases(suite, cases, n, timeout_ms, NULL, 0);
}
