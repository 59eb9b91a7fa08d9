/* tcmd killed by a test crash point between two steps of each mutating
 * operation (split, coalesce, refill, return, page runs, root set and the
 * two steps inside its seqlock write, span making and unmaking, commit,
 * release, reclaim, client creation), while
 * worker processes run the shared workload: the next tcmd recovers, its
 * validator is clean, the workers carry on without a failed allocation, and
 * everything comes back once they are done. Each point runs in its own child
 * (tt_run_cases: a point that hangs fails alone) with its own daemon. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "crash_points.h"
#include "tcm.h"
#include "testutil.h"
#include "workload.h"

#define WORKERS 2

static wl_shared_t *wl;

typedef struct point {
    int hit;         /* crash at this hit of the point */
    int (*trigger)(tcm_test_daemon_t *d); /* beyond the workload, if the point needs it */
    const char *elsewhere; /* the suite that covers it instead */
} point_t;

static int trigger_release(tcm_test_daemon_t *d)
{
    char out[512];
    for (int i = 0; i < 20; i++) { /* until the point kills tcmd; then tcmctl just fails */
        tt_tcmctl(d, "release", out, sizeof out);
        usleep(20000);
    }
    return 0;
}

/* a client that dies with full caches */
static int cacher(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(NULL), 0);
    static void *p[3000];
    for (int i = 0; i < 3000; i++)
        CHECK((p[i] = tcm_malloc(64 + i % 900)) != NULL);
    for (int i = 0; i < 3000; i++)
        tcm_free(p[i]);
    raise(SIGKILL);
    return 0;
}

static int trigger_reclaim(tcm_test_daemon_t *d)
{
    (void)d;
    pid_t pid = tt_fork(cacher, NULL);
    waitpid(pid, NULL, 0);
    return 0;
}

/* a process attaching for the first time while tcmd dies: it has nothing
 * to wait for, so it fails at once (the tcmd hung up on it, or is not back
 * yet), or attaches to the next if that one is up */
static int late_attacher(void *arg)
{
    (void)arg;
    int rc = tcm_init(NULL);
    if (rc == -ECONNRESET || rc == -EPIPE || rc == -ECONNREFUSED || rc == -ENOENT)
        return 0;
    CHECK_EQ(rc, 0);
    void *p = tcm_malloc(100);
    CHECK(p != NULL);
    tcm_free(p);
    tcm_shutdown();
    return 0;
}

static pid_t attacher;

static int trigger_attach(tcm_test_daemon_t *d)
{
    (void)d;
    attacher = tt_fork(late_attacher, NULL);
    return 0;
}

/* The case of each point of daemon/crash_points.h, by its symbol: a point
 * added there without a case here fails main. */
static const point_t points[TCM_CRASH_COUNT] = {
    [TCM_CRASH_picked] = {40, NULL},      [TCM_CRASH_refill] = {25, NULL},
    [TCM_CRASH_refill_span] = {9, NULL},  [TCM_CRASH_return_half] = {20, NULL},
    [TCM_CRASH_alloc_pages] = {6, NULL},  [TCM_CRASH_free_pages] = {6, NULL},
    [TCM_CRASH_root_set] = {2, NULL},     [TCM_CRASH_root_odd] = {2, NULL},
    [TCM_CRASH_root_data] = {3, NULL},    [TCM_CRASH_span_map] = {5, NULL},
    [TCM_CRASH_span_rec] = {4, NULL},    [TCM_CRASH_tag_block] = {3, NULL},
    [TCM_CRASH_span_unmap] = {3, NULL},   [TCM_CRASH_split] = {7, NULL},
    [TCM_CRASH_coalesce] = {4, NULL},     [TCM_CRASH_tail] = {45, NULL},
    [TCM_CRASH_commit] = {60, NULL},      [TCM_CRASH_answered] = {33, NULL},
    [TCM_CRASH_release] = {2, trigger_release}, [TCM_CRASH_reclaim] = {2, trigger_reclaim},
    [TCM_CRASH_client_create] = {3, trigger_attach},
    /* a dead client's page run: its own repair case */
    [TCM_CRASH_reclaim_run] = {.elsewhere = "test_crashrepair"},
    /* a stock of sample runs: asked for only after a sample */
    [TCM_CRASH_sample_run] = {.elsewhere = "test_crashrepair"},
    /* a run committed in steps: the workload's runs take one step */
    [TCM_CRASH_pages_step] = {.elsewhere = "test_crashrepair"},
    /* needs a heap of the previous state layout */
    [TCM_CRASH_migrate] = {.elsewhere = "test_crashrepair"},
};

static const char *const point_names[TCM_CRASH_COUNT] = {TCM_CRASH_POINT_LIST(TCM_CRASH_NAME)};

static void run_point(const void *arg)
{
    const point_t *pt = arg;
    const char *name = point_names[pt - points];
    wl = wl_shared();
    char spec[96];
    snprintf(spec, sizeof spec, "TCM_TEST_CRASH_AT=%s:%d", name, pt->hit);
    const char *env[] = {spec, NULL};
    tcm_test_daemon_t d;
    tt_daemon_start_env(&d, NULL, env);
    pid_t pids[WORKERS];
    attacher = 0;
    wl_spawn(wl, WORKERS, pids); /* the point may kill tcmd before they have all attached */
    if (pt->trigger)
        pt->trigger(&d);
    /* the point kills tcmd with SIGKILL */
    int st = tt_daemon_wait_exit(&d, 150000); /* sanitizer builds under load are slow */
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) {
        fprintf(stderr, "crash point %s: tcmd ended with status 0x%x, not SIGKILL\n", name, st);
        abort();
    }
    tt_daemon_restart(&d, NULL, NULL);
    wl_wait_ready(wl, WORKERS);
    /* the whole log: the killed tcmd's debug lines come first, and may be
     * more than a buffer's worth */
    CHECK(tt_log_contains(&d, "recovery done"));
    CHECK(tt_log_contains(&d, "validator: consistent"));
    CHECK_EQ(tt_stat(&d, "validation_failures"), 0);
    wl_wait_ops(wl, 2000);
    tt_check_heap(&d);
    CHECK_EQ(wl_stop(wl, WORKERS, pids), 0);
    if (attacher)
        tt_wait_ok(attacher, 60000);
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0);
    CHECK_EQ(tt_stat(&d, "refused"), 0);
    tt_check_heap(&d);
    fprintf(stderr, "crash point %-14s hit %2d: recovered (%llu redone, %llu served again)\n", name, pt->hit,
           (unsigned long long)tt_stat(&d, "recovery_redone"), (unsigned long long)tt_stat(&d, "recovery_rolled_back"));
    tt_daemon_stop(&d);
}

int main(int argc, char **argv)
{
    static tt_case_t cases[TCM_CRASH_COUNT];
    int ncases = 0, uncovered = 0;
    for (int i = 0; i < TCM_CRASH_COUNT; i++) {
        if (points[i].elsewhere)
            continue;
        if (!points[i].hit) {
            fprintf(stderr, "crash point %s (daemon/crash_points.h) has no case here\n", point_names[i]);
            uncovered++;
            continue;
        }
        cases[ncases++] = (tt_case_t){.name = point_names[i], .fn_arg = run_point, .arg = &points[i]};
    }
    int failed = tt_run_named_cases("crashpoints", cases, ncases, 300000, argv + 1, argc - 1) != 0;
    return failed || uncovered;
}
