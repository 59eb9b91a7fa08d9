/* crash.c — see crash.h. */
#include "crash.h"

#ifdef TCM_CRASH_POINTS
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "prim.h"

bool tcm__crash_armed;
static char armed_name[64];
static long remaining;

void tcm__crash_init(void)
{
    const char *spec = getenv("TCM_TEST_CRASH_AT");
    const char *colon = spec ? strchr(spec, ':') : NULL;
    if (!colon || colon == spec || (size_t)(colon - spec) >= sizeof armed_name)
        return;
    memcpy(armed_name, spec, (size_t)(colon - spec));
    remaining = strtol(colon + 1, NULL, 10);
    tcm__crash_armed = remaining > 0;
    if (tcm__crash_armed)
        tcm__log(TCM_LOG_WARN, "test crash point armed: %s, hit %ld", armed_name, remaining);
}

void tcm__crash_point(const char *name)
{
    if (strcmp(name, armed_name) != 0 || --remaining > 0)
        return;
    tcm__log(TCM_LOG_WARN, "test crash point %s reached: SIGKILL", name);
    tcm__kill_self();
}
#endif
