/* cases.c — the test-case runner (cases.h). */
#define _GNU_SOURCE
#include "cases.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
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
        if (ok)
            printf("ok   %s\n", cases[i].name);
        else if (timed_out)
            printf("FAIL %s: timed out after %d ms\n", cases[i].name, timeout_ms);
        else if (WIFSIGNALED(st))
            printf("FAIL %s: killed by signal %d\n", cases[i].name, WTERMSIG(st));
        else
            printf("FAIL %s: exit status %d\n", cases[i].name, WEXITSTATUS(st));
        failed += !ok;
    }
    printf("%s: %zu passed, %d failed\n", suite, n - (size_t)failed, failed);
    return failed;
}
