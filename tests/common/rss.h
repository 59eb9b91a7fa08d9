/* rss.h — a process's resident memory, from /proc/PID/status. Header-only:
 * the drop-in's test programs (tests/preload/) use it too, and they must
 * not link libtcm through tcm_testutil. */
#ifndef TCM_TESTS_RSS_H
#define TCM_TESTS_RSS_H

#include <stdio.h>
#include <sys/types.h>

/* Process pid's VmRSS in KiB (0: this process); -1 if it cannot be read. */
static inline long tt_rss_kb(pid_t pid)
{
    char path[64], line[256];
    if (pid)
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/status");
    FILE *f = fopen(path, "r");
    long kb = -1;
    if (!f)
        return -1;
    while (kb < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kb) != 1)
            kb = -1;
    fclose(f);
    return kb;
}

#endif
