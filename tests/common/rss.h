/* rss.h — a process's resident memory and threads, from /proc/PID/status.
 * Header-only: the drop-in's test programs (tests/preload/) use it too, and
 * they must not link libtcm through tcm_testutil. */
#ifndef TCM_TESTS_RSS_H
#define TCM_TESTS_RSS_H

#include <stdio.h>
#include <string.h>
#include <sys/types.h>

/* The number after "FIELD:" in process pid's status (0: this process); -1
 * if it cannot be read. */
static inline long tt_status_value(pid_t pid, const char *field)
{
    char path[64], line[256];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/status");
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f)
        return -1;
    size_t n = strlen(field);
    while (v < 0 && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) != 0 || line[n] != ':' || sscanf(line + n + 1, "%ld", &v) != 1)
            v = -1;
    fclose(f);
    return v;
}

/* Process pid's VmRSS in KiB (0: this process); -1 if it cannot be read. */
static inline long tt_rss_kb(pid_t pid)
{
    return tt_status_value(pid, "VmRSS");
}

#endif
