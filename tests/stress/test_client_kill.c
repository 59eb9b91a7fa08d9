/* Clients SIGKILLed at random instants, KILLS times, while worker processes
 * run the shared workload (tagged objects of every size, cross-process
 * frees through the exchange, caches full of batches in flight: RETURNs
 * posted without waiting, batches asked for ahead). After each death tcmd
 * reclaims the dead worker's caches and the whole-heap check must be clean;
 * a replacement worker starts. No surviving worker may find a corrupt or
 * doubly handed-out object, no good object may be refused, and at the end,
 * with every worker gone, the heap still checks clean and what is left in
 * use is exactly what the dead workers still held (orphaned). Seeded. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"
#include "workload.h"

#define KILLS 40

int main(int argc, char **argv)
{
    wl_stress_t s;
    wl_stress_start(&s, argc, argv, KILLS, 424242);
    tcm_test_daemon_t *d = &s.d;
    wl_shared_t *wl = s.wl;
    pid_t *pids = s.pids;
    uint64_t reclaimed = 0;
    for (int k = 1; k <= s.kills; k++) {
        uint64_t seed = wl_stress_next(&s, 2000, 60000); /* 2-62 ms into the work */
        int victim = (int)((seed >> 20) % WL_STRESS_WORKERS);
        uint64_t died = tt_stat(d, "clients_died");
        kill(pids[victim], SIGKILL);
        CHECK(WIFSIGNALED(tt_wait(pids[victim], 10000)));
        CHECK_EQ(tt_wait_stat(d, "clients_died", died + 1, 10000), died + 1);
        tt_check_heap(d);
        pids[victim] = wl_spawn_one(wl, WL_STRESS_WORKERS + k);
        wl_wait_ready(wl, WL_STRESS_WORKERS + k); /* attached before it may be the next victim */
        wl_wait_ops(wl, 300);
    }
    reclaimed = tt_stat(d, "reclaimed_objects");
    CHECK_EQ(wl_stop(wl, WL_STRESS_WORKERS, pids), 0);
    CHECK_EQ(tt_wait_stat(d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(d, "refused"), 0);
    tt_check_heap(d);
    /* nobody is attached: what is still handed out is what the dead held
     * (their caches came back; nothing else is counted) */
    uint64_t orphaned = tt_stat(d, "bytes_orphaned"), in_use = tt_stat(d, "bytes_clients");
    CHECK_EQ(in_use, orphaned);
    printf("client kill stress: %d kills under %d workers, %llu operations, %llu objects handed between "
           "processes, %llu cached objects reclaimed, %llu bytes orphaned (in use %llu)\n",
           s.kills, WL_STRESS_WORKERS, (unsigned long long)atomic_load(&wl->ops),
           (unsigned long long)atomic_load(&wl->handed_over),
           (unsigned long long)reclaimed, (unsigned long long)orphaned, (unsigned long long)in_use);
    CHECK_GT(reclaimed, 0);
    tt_daemon_stop(d);
    return 0;
}
