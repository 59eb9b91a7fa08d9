/* spawn.c — spawn.h on Linux (fork + exec of /proc/self/exe) and Windows
 * (CreateProcess of the module's own path). */
#define _GNU_SOURCE
#include "spawn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef _WIN32
#include <windows.h>

int tt_spawn_self(const char *role, const char *arg, tt_proc_t *out)
{
    char self[MAX_PATH];
    STARTUPINFOA si = {.cb = sizeof si};
    PROCESS_INFORMATION pi;
    if (!GetModuleFileNameA(NULL, self, sizeof self))
        return -EIO;
    fflush(stdout);
    fflush(stderr);
    /* the child inherits the environment as it is now */
    SetEnvironmentVariableA("TCM_TEST_ROLE", role);
    SetEnvironmentVariableA("TCM_TEST_ARG", arg ? arg : "");
    BOOL ok = CreateProcessA(self, NULL, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi);
    SetEnvironmentVariableA("TCM_TEST_ROLE", NULL);
    SetEnvironmentVariableA("TCM_TEST_ARG", NULL);
    if (!ok)
        return -EIO;
    CloseHandle(pi.hThread);
    out->id = (intptr_t)pi.hProcess;
    return 0;
}

int tt_proc_wait(tt_proc_t p, int timeout_ms, bool *timed_out)
{
    HANDLE h = (HANDLE)p.id;
    DWORD code = 0;
    *timed_out = WaitForSingleObject(h, (DWORD)timeout_ms) == WAIT_TIMEOUT;
    if (*timed_out) {
        TerminateProcess(h, 137);
        WaitForSingleObject(h, INFINITE);
    }
    GetExitCodeProcess(h, &code);
    CloseHandle(h);
    return *timed_out ? -1 : code > 255 ? -1 : (int)code; /* abort() exits 3 */
}

const char *tt_role(void)
{
    static char role[64];
    DWORD n = GetEnvironmentVariableA("TCM_TEST_ROLE", role, sizeof role);
    return n && n < sizeof role ? role : NULL;
}

const char *tt_role_arg(void)
{
    static char arg[512];
    DWORD n = GetEnvironmentVariableA("TCM_TEST_ARG", arg, sizeof arg);
    return n < sizeof arg ? arg : "";
}

#else
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int tt_spawn_self(const char *role, const char *arg, tt_proc_t *out)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        setenv("TCM_TEST_ROLE", role, 1);
        setenv("TCM_TEST_ARG", arg ? arg : "", 1);
        execl("/proc/self/exe", "/proc/self/exe", (char *)NULL);
        _exit(127);
    }
    out->id = pid;
    return 0;
}

int tt_proc_wait(tt_proc_t p, int timeout_ms, bool *timed_out)
{
    int st;
    *timed_out = false;
    for (int t = 0;; t += 5) {
        pid_t r = waitpid((pid_t)p.id, &st, WNOHANG);
        if (r == (pid_t)p.id)
            break;
        if (r < 0)
            return -1;
        if (t >= timeout_ms) {
            *timed_out = true;
            kill((pid_t)p.id, SIGKILL);
            waitpid((pid_t)p.id, &st, 0);
            return -1;
        }
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const char *tt_role(void)
{
    return getenv("TCM_TEST_ROLE");
}

const char *tt_role_arg(void)
{
    const char *a = getenv("TCM_TEST_ARG");
    return a ? a : "";
}
#endif
