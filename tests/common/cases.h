/* cases.h — test cases, each in a child process of its own (fork) with a
 * timeout: a CHECK that aborts, a crash or a hang fails that case only and
 * the next one runs. Prints "ok"/"FAIL" per case and "SUITE: N passed, M
 * failed" (counted); returns the number that failed. Linked by unit and
 * integration tests alike. */
#ifndef TCM_TEST_CASES_H
#define TCM_TEST_CASES_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct tt_case {
    const char *name;
    void (*fn)(void);
    /* instead of fn, for the rows of a table (one crash point each) */
    void (*fn_arg)(const void *arg);
    const void *arg;
} tt_case_t;

int tt_run_cases(const char *suite, const tt_case_t *cases, size_t n, int timeout_ms);
/* The same for the cases named in names[0..nnames) only (all of them when
 * nnames is 0): a suite's command line picks the cases to run. A name no
 * case has fails. */
int tt_run_named_cases(const char *suite, const tt_case_t *cases, size_t n, int timeout_ms, char *const *names,
                       int nnames);
#ifndef _WIN32
/* A child's raw status, or, SIGKILLed once timeout_ms passed, its status
 * then with *timed_out set. */
int tt_wait_timed(pid_t pid, int timeout_ms, bool *timed_out);
#endif

#endif
