/* tcmd SIGKILLed at random instants, KILLS times, while worker processes
 * run the shared workload (tagged objects of every size, cross-process
 * frees, spans emptied and refilled, roots set). After each restart the
 * recovery's validator must be clean; at the end no allocation has failed,
 * no object was corrupt or handed out twice, and once everything is freed
 * and released the heap holds (almost) no memory. Seeded: the kill
 * instants are the same every run. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"
#include "workload.h"

#define KILLS 60

int main(int argc, char **argv)
{
    wl_stress_t s;
    wl_stress_start(&s, argc, argv, KILLS, 12345);
    uint64_t peak = 0;
    for (int k = 1; k <= s.kills; k++) {
        wl_stress_next(&s, 5000, 120000); /* 5-125 ms into the work */
        uint64_t committed = tt_stat(&s.d, "bytes_committed");
        peak = committed > peak ? committed : peak;
        tt_daemon_kill(&s.d);
        tt_daemon_restart(&s.d, NULL, NULL);
        CHECK_EQ(tt_stat(&s.d, "restarts"), (uint64_t)k);
        CHECK_EQ(tt_stat(&s.d, "validation_failures"), 0); /* the validator ran at the end of the recovery */
        wl_wait_ops(s.wl, 300);
    }
    char out[1024];
    tt_check_heap(&s.d);
    CHECK_EQ(wl_stop(s.wl, WL_STRESS_WORKERS, s.pids), 0);
    CHECK_EQ(tt_wait_stat(&s.d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&s.d, "bytes_clients"), 0);
    CHECK_EQ(tt_stat(&s.d, "bytes_orphaned"), 0);
    CHECK_EQ(tt_stat(&s.d, "refused"), 0);
    tt_check_heap(&s.d);
    CHECK_EQ(tt_tcmctl(&s.d, "release", out, sizeof out), 0);
    uint64_t after = tt_stat(&s.d, "bytes_committed");
    CHECK_LT(after, peak / 20);
    printf("kill stress: %d kills under %d workers, %llu operations, %llu objects handed between processes, "
           "%llu requests redone, %llu served again; committed %llu of a %llu peak after release\n",
           s.kills, WL_STRESS_WORKERS, (unsigned long long)atomic_load(&s.wl->ops),
           (unsigned long long)atomic_load(&s.wl->handed_over),
           (unsigned long long)tt_stat(&s.d, "recovery_redone"),
           (unsigned long long)tt_stat(&s.d, "recovery_rolled_back"),
           (unsigned long long)after, (unsigned long long)peak);
    tt_daemon_stop(&s.d);
    return 0;
}
