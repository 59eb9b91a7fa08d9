/* spawn.h — a test program that starts itself again in another role, on
 * Linux and on Windows (under Wine): how the platform tests put the two
 * sides of a segment or a ring in two processes. The role and one argument
 * travel in the environment (TCM_TEST_ROLE, TCM_TEST_ARG). */
#ifndef TCM_TEST_SPAWN_H
#define TCM_TEST_SPAWN_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tt_proc {
    intptr_t id; /* pid, or the process HANDLE */
} tt_proc_t;

/* This program again, with role and arg in its environment; 0 or -errno. */
int tt_spawn_self(const char *role, const char *arg, tt_proc_t *out);
/* Its exit status (0-255); killed once timeout_ms passed (*timed_out set,
 * returns -1), or -1 when it died of a signal. */
int tt_proc_wait(tt_proc_t p, int timeout_ms, bool *timed_out);
/* The role this process was started in (NULL: the first one), its arg. */
const char *tt_role(void);
const char *tt_role_arg(void);

#endif
