/* crash.h — test-only crash points: TCM_CRASH_POINT("name") kills tcmd
 * with SIGKILL at the Nth time it is reached when tcmd was started with
 * TCM_TEST_CRASH_AT=name:N in its environment, so tests can stop the heap
 * thread between any two steps of an operation. Built in with the CMake
 * option TCM_CRASH_POINTS (off by default, so that a released tcmd ignores
 * its environment: the test builds turn it on; one predictable branch on a
 * global when disarmed). */
#ifndef TCM_CRASH_H
#define TCM_CRASH_H

#include <stdbool.h>

#ifdef TCM_CRASH_POINTS
extern bool tcm__crash_armed;
void tcm__crash_point(const char *name);
void tcm__crash_init(void);
#define TCM_CRASH_POINT(name)                                                                      \
    do {                                                                                           \
        if (__builtin_expect(tcm__crash_armed, 0))                                                 \
            tcm__crash_point(name);                                                                \
    } while (0)
#else
#define TCM_CRASH_POINT(name) ((void)0)
static inline void tcm__crash_init(void) {}
#endif

#endif
