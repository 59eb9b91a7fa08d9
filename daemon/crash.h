/* crash.h — test-only crash points: TCM_CRASH_POINT(name), name one of
 * crash_points.h, kills tcmd with SIGKILL at the Nth time it is reached
 * when tcmd was started with TCM_TEST_CRASH_AT=name:N in its environment,
 * so tests can stop the heap thread between any two steps of an operation.
 * Built in with the CMake option TCM_CRASH_POINTS (off by default, so that
 * a released tcmd ignores its environment: the test builds turn it on; one
 * predictable branch on a global when disarmed). */
#ifndef TCM_CRASH_H
#define TCM_CRASH_H

#include <stdbool.h>

#include "crash_points.h"

#ifdef TCM_CRASH_POINTS
extern bool tcm__crash_armed;
void tcm__crash_point(tcm_crash_point_t point);
void tcm__crash_init(void);
#define TCM_CRASH_POINT(name)                                                                      \
    do {                                                                                           \
        if (__builtin_expect(tcm__crash_armed, 0))                                                 \
            tcm__crash_point(TCM_CRASH_##name);                                                    \
    } while (0)
#else
/* still names the point, so that a site naming none fails in every build */
#define TCM_CRASH_POINT(name) ((void)TCM_CRASH_##name)
static inline void tcm__crash_init(void) {}
#endif

#endif
