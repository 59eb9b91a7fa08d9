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
        printf("FAIL %s: timed out after %d ms\n", c->name, timeout_ms);
    else if (signal)
        printf("FAIL %s: killed by signal %d\n", c->name, signal);
    else
        printf("FAIL %s: exit status %d\n", c->name, status);
}

#ifdef _WIN32
#include "spawn.h"

/* No fork: each case is this program again, told which case to run. */
int tt_run_cases(const char *suite, const tt_case_t *cases, size_t n, int timeout_ms)
{
    const char *role = tt_role();
    if (role && strcmp(role, "case") == 0) {
        for (size_t i = 0; i < n; i++) {
            if (strcmp(cases[i].name, tt_role_arg()) == 0) {
                cases[i].fn();
                exit(0);
            }
        }
        fprintf(stderr, "no case named '%s'\n", tt_role_arg());
        exit(2); /* a case that did not run has not passed */
    }
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        tt_proc_t p;
        bool timed_out = false;
        int status = tt_spawn_self("case", cases[i].name, &p) == 0 ? tt_proc_wait(p, timeout_ms, &timed_out) : 127;
        report(&cases[i], status == 0, timed_out, 0, status, timeout_ms);
        failed += status != 0;
    }
    printf("%s: %zu passed, %d failed\n", suite, n - (size_t)failed, failed);
    return failed;
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

int tt_run_cases(const char *suite, const tt_case_t *cases, size_t n, int timeout_ms)
{
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            abort();
        }
        if (pid == 0) {
            cases[i].fn();
            exit(0); /* exit, not _exit: the library's exit handler gives the caches back */
        }
        bool timed_out;
        int st = tt_wait_timed(pid, timeout_ms, &timed_out);
        bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        report(&cases[i], ok, timed_out, WIFSIGNALED(st) ? WTERMSIG(st) : 0, WIFEXITED(st) ? WEXITSTATUS(st) : 0,
               timeout_ms);
        failed += !ok;
    }
    printf("%s: %zu passed, %d failed\n", suite, n - (size_t)failed, failed);
    return failed;
}
#endif
