/* util.c — sizes with binary suffixes. */
#include "util.h"
#include "tcm_assert.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int tcm__parse_size(const char *s, uint64_t *out)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -EINVAL;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: return -EINVAL;
    }
    if (*end) {
        end++;
        if (toupper((unsigned char)*end) == 'I')
            end++;
        if (toupper((unsigned char)*end) == 'B')
            end++;
        if (*end)
            return -EINVAL;
    }
    if (shift && v > (UINT64_MAX >> shift))
        return -EINVAL;
    *out = (uint64_t)v << shift;
    return 0;
}

const char *tcm__format_size(uint64_t v, char *buf, size_t len)
{
    static const char units[] = "BKMGTP";
    double d = (double)v;
    int u = 0;
    while (d >= 1024 && u < 5) {
        d /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%lluB", (unsigned long long)v);
    else
        snprintf(buf, len, d < 10 ? "%.2f%c" : d < 100 ? "%.1f%c" : "%.0f%c", d, units[u]);
    return buf;
}

const char *tcm__format_age(uint64_t s, char *buf, size_t len)
{
    if (s < 60)
        snprintf(buf, len, "%llus", (unsigned long long)s);
    else if (s < 3600)
        snprintf(buf, len, "%llum%02llus", (unsigned long long)(s / 60), (unsigned long long)(s % 60));
    else if (s < 86400)
        snprintf(buf, len, "%lluh%02llum", (unsigned long long)(s / 3600), (unsigned long long)(s / 60 % 60));
    else
        snprintf(buf, len, "%llud%02lluh", (unsigned long long)(s / 86400), (unsigned long long)(s / 3600 % 24));
    return buf;
}

void tcm__assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "tcm: internal error: assertion %s failed at %s:%d\n", expr, file, line);
    abort();
}
