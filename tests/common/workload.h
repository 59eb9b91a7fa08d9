/* workload.h — a multi-process heap workload for restart and crash tests:
 * worker processes allocate objects of every size (page runs included),
 * tag them, hand some to other workers through a shared exchange, check
 * every object they free, empty their caches now and then (spans go back
 * to the page heap) and set roots. A NULL from tcm_malloc is counted, a
 * corrupt object or a doubly handed-out one aborts the worker. */
#ifndef TCM_WORKLOAD_H
#define TCM_WORKLOAD_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "testutil.h"

#define WL_EXCHANGE 1024

typedef struct wl_shared {
    _Atomic int stop;
    _Atomic int ready;
    _Atomic uint64_t ops, failures, handed_over, serial;
    _Atomic uint64_t exchange[WL_EXCHANGE]; /* heap offsets, 0 = empty */
} wl_shared_t;

/* Shared memory for the workers; call once, before forking them. */
wl_shared_t *wl_shared(void);
/* Fork n workers (ids 1..n), wait until each attached and min_ops ran. */
void wl_start(wl_shared_t *sh, int n, pid_t *pids, uint64_t min_ops);
/* The same in two steps: fork them; wait until all attached. */
void wl_spawn(wl_shared_t *sh, int n, pid_t *pids);
/* One more worker (id: its seed; distinct ids run different sequences). */
pid_t wl_spawn_one(wl_shared_t *sh, int id);
void wl_wait_ready(wl_shared_t *sh, int n);
/* Wait until the workers did `more` operations (aborts after 60 s). */
void wl_wait_ops(wl_shared_t *sh, uint64_t more);
/* Tell them to stop, wait for them; then free what is left in the
 * exchange from this process. Returns the failures counted. */
uint64_t wl_stop(wl_shared_t *sh, int n, pid_t *pids);

/* The frame of a seeded kill stress test (stress.kill_restart,
 * stress.client_kill): a private tcmd, WL_STRESS_WORKERS workers of the
 * workload running, how many kills to do (argv[1], else a default), and
 * the kill instants drawn from a seed, the same every run. */
#define WL_STRESS_WORKERS 3

typedef struct wl_stress {
    wl_shared_t *wl;
    tcm_test_daemon_t d;
    pid_t pids[WL_STRESS_WORKERS];
    int kills;
    uint64_t seed;
} wl_stress_t;

void wl_stress_start(wl_stress_t *s, int argc, char **argv, int kills, uint64_t seed);
/* Wait for the next kill: min_us plus a seeded part below span_us into
 * the work. Returns the seed's next value (for the test's other draws). */
uint64_t wl_stress_next(wl_stress_t *s, unsigned min_us, unsigned span_us);

#endif
