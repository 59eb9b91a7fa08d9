/* tcm_assert.h — assertion levels, chosen at build time with the CMake
 * option TCM_ASSERT_LEVEL:
 *   0  none;
 *   1  cheap checks (default): a few compares on slow paths;
 *   2  internal checks: invariants inside the allocator's own structures;
 *   3  expensive checks: the whole-heap validator runs periodically on the
 *      heap thread (the sanitizer builds of the test suite use this).
 * A failed assertion is a bug in tcm, never bad input: it aborts with the
 * expression and its place. */
#ifndef TCM_ASSERT_H
#define TCM_ASSERT_H

#ifndef TCM_ASSERT_LEVEL
#define TCM_ASSERT_LEVEL 1
#endif

void tcm__assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));

#define TCM_ASSERT_AT(level, cond)                                                                 \
    do {                                                                                           \
        if (TCM_ASSERT_LEVEL >= (level) && __builtin_expect(!(cond), 0))                           \
            tcm__assert_fail(#cond, __FILE__, __LINE__);                                           \
    } while (0)

#define TCM_ASSERT(cond) TCM_ASSERT_AT(1, cond)
#define TCM_ASSERT_INTERNAL(cond) TCM_ASSERT_AT(2, cond)
#define TCM_EXPENSIVE_CHECKS (TCM_ASSERT_LEVEL >= 3)

#endif
