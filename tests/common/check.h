/* check.h — assertions that print both operands and abort the test process
 * (each test binary is one ctest test; multi-step tests fork children). */
#ifndef TCM_CHECK_H
#define TCM_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);          \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

#define CHECK_OP(a, op, b)                                                                    \
    do {                                                                                      \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                       \
        if (!(check_a_ op check_b_)) {                                                        \
            fprintf(stderr, "%s:%d: CHECK(%s %s %s) failed: %lld vs %lld\n", __FILE__,        \
                    __LINE__, #a, #op, #b, check_a_, check_b_);                              \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

#define CHECK_EQ(a, b) CHECK_OP(a, ==, b)
#define CHECK_NE(a, b) CHECK_OP(a, !=, b)
#define CHECK_LT(a, b) CHECK_OP(a, <, b)
#define CHECK_LE(a, b) CHECK_OP(a, <=, b)
#define CHECK_GT(a, b) CHECK_OP(a, >, b)
#define CHECK_GE(a, b) CHECK_OP(a, >=, b)

#endif
