/* log.c — timestamped log lines to stderr or a file. */
#include "log.h"
#include "prim.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>

static FILE *log_file;
static _Atomic int log_level = TCM_LOG_INFO;
static _Atomic long limited_second;
static _Atomic int limited_count;

void tcm__log_open(FILE *f, int level)
{
    log_file = f;
    log_level = level;
}

int tcm__log_level(void)
{
    return log_level;
}

void tcm__log_set_level(int level)
{
    log_level = level;
}

static void vlog(int level, const char *fmt, va_list ap)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    FILE *f = log_file ? log_file : stderr;
    char when[48];
    tcm__wall_clock(when, sizeof when);
    char line[1024];
    int n = snprintf(line, sizeof line, "%s tcmd[%u] %s: ", when, tcm__pid(), names[level]);
    if (n < 0 || n >= (int)sizeof line)
        return;
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    fprintf(f, "%s\n", line); /* one call: lines from two threads do not interleave */
    fflush(f);
}

void tcm__log(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void tcm__log_limited(int level, const char *fmt, ...)
{
    if (level > log_level)
        return;
    long now = (long)time(NULL);
    if (atomic_exchange(&limited_second, now) != now)
        atomic_store(&limited_count, 0);
    int n = atomic_fetch_add(&limited_count, 1);
    if (n > 10)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (n == 10)
        tcm__log(level, "(more lines like the next suppressed this second)");
    vlog(level, fmt, ap);
    va_end(ap);
}
