/* crash.c — see crash.h. */
#include "crash.h"

#ifdef TCM_CRASH_POINTS
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "prim.h"

bool tcm__crash_armed;
static tcm_crash_point_t armed_point;
static long remaining;

static const char *const point_names[TCM_CRASH_COUNT] = {TCM_CRASH_POINT_LIST(TCM_CRASH_NAME)};

void tcm__crash_init(void)
{
    const char *spec = getenv("TCM_TEST_CRASH_AT");
    const char *colon = spec ? strchr(spec, ':') : NULL;
    if (!colon)
        return;
    size_t len = (size_t)(colon - spec);
    for (int p = 0; p < TCM_CRASH_COUNT; p++) {
        if (strlen(point_names[p]) != len || memcmp(point_names[p], spec, len) != 0)
            continue;
        armed_point = (tcm_crash_point_t)p;
        remaining = strtol(colon + 1, NULL, 10);
        tcm__crash_armed = remaining > 0;
        if (tcm__crash_armed)
            tcm__log(TCM_LOG_WARN, "test crash point armed: %s, hit %ld", point_names[p], remaining);
        return;
    }
    tcm__log(TCM_LOG_WARN, "TCM_TEST_CRASH_AT=%s names no crash point (daemon/crash_points.h): ignored", spec);
}

void tcm__crash_point(tcm_crash_point_t point)
{
    if (point != armed_point || --remaining > 0)
        return;
    tcm__log(TCM_LOG_WARN, "test crash point %s reached: SIGKILL", point_names[point]);
    tcm__kill_self();
}
#endif
