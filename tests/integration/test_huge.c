/* The heap on 2 MiB pages, as the kernel sees it: tcmd collapses the
 * ranges a client keeps in use, the client's own mapping of them is then
 * mostly large pages (its smaps), a tcmd restart keeps them (the hint),
 * the decay gives back a collapsed range only whole, a release under
 * pressure splits and counts, and huge_collapse_ms 0 turns it off. Skips
 * (77) where the kernel cannot collapse shared memory (huge_off). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"

#define HUGE (2u << 20)
#define RUNS 150       /* page runs of 320 KiB (not a small class's: a free goes to tcmd, not a bin) */
#define RUN (320u << 10)
#define RANGES (RUNS * RUN / HUGE) /* whole ranges the runs cover at most: 23 */
#define SPACED 7       /* one run in 7 is freed: at most one in a range, 40 of its 256 pages */

static const char *socket_path;
static _Atomic int *phase; /* shared with the child: the step it is asked to take, then has taken */
static _Atomic uint64_t *pmd_kb, *rss_kb;

/* The client's own mapping of the heap (the VMA at tcm's base), as smaps
 * gives it. */
static void heap_smaps(const void *inside, uint64_t *rss, uint64_t *pmd)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL);
    char line[512];
    bool in = false;
    *rss = *pmd = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        unsigned long long v;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            in = (uintptr_t)inside >= lo && (uintptr_t)inside < hi;
            continue;
        }
        if (in && sscanf(line, "Rss: %llu kB", &v) == 1)
            *rss = v;
        if (in && sscanf(line, "ShmemPmdMapped: %llu kB", &v) == 1)
            *pmd = v;
    }
    fclose(f);
}

static void wait_phase(int want)
{
    for (int i = 0; i < 60000 && atomic_load(phase) != want; i++)
        usleep(1000);
    CHECK_EQ(atomic_load(phase), want);
}

/* Phases: 1 allocated and touched; asked 2: touch again and report smaps
 * (3); asked 4: free one run in SPACED (5); asked 6: free the rest (7);
 * asked 8: exit. */
static int client(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(socket_path), 0);
    static unsigned char *run[RUNS];
    for (int i = 0; i < RUNS; i++) {
        run[i] = tcm_malloc(RUN);
        CHECK(run[i] != NULL);
        memset(run[i], i + 1, RUN);
    }
    atomic_store(phase, 1);
    wait_phase(2);
    for (int i = 0; i < RUNS; i++) /* its mapping faults the large pages in */
        for (size_t o = 0; o < RUN; o += 4096)
            CHECK_EQ(run[i][o], (unsigned char)(i + 1));
    uint64_t rss, pmd;
    heap_smaps(run[0], &rss, &pmd);
    atomic_store(rss_kb, rss);
    atomic_store(pmd_kb, pmd);
    atomic_store(phase, 3);
    wait_phase(4);
    for (int i = 0; i < RUNS; i += SPACED)
        tcm_free(run[i]);
    atomic_store(phase, 5);
    wait_phase(6);
    for (int i = 0; i < RUNS; i++) {
        if (i % SPACED == 0)
            continue;
        for (size_t o = 0; o < RUN; o += 4096)
            CHECK_EQ(run[i][o], (unsigned char)(i + 1));
        tcm_free(run[i]);
    }
    atomic_store(phase, 7);
    wait_phase(8);
    tcm_shutdown();
    return 0;
}

static uint64_t wait_at_least(const tcm_test_daemon_t *d, const char *stat, uint64_t want, int timeout_ms)
{
    uint64_t v = 0;
    for (int t = 0; t < timeout_ms && (v = tt_stat(d, stat)) < want; t += 20)
        usleep(20000);
    return v;
}

static bool kernel_can(const tcm_test_daemon_t *d)
{
    return tt_stat(d, "huge_off") == 0;
}

int main(void)
{
    phase = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(phase != MAP_FAILED);
    pmd_kb = (_Atomic uint64_t *)(phase + 16);
    rss_kb = pmd_kb + 1;
    tcm_test_daemon_t d;
    char out[512];
    /* a decay of a second: the quiet spell below comes quickly, and a
     * step (decay_ms / 160) is shorter than the waits */
    const char *args[] = {"--decay-ms", "1000", NULL};
    tt_daemon_start(&d, args);
    socket_path = d.socket;
    pid_t pid = tt_fork(client, NULL);
    wait_phase(1);

    /* collapsed: every whole range of the runs, the rest of the heap not */
    uint64_t ranges = wait_at_least(&d, "huge_ranges", RANGES - 1, 30000);
    if (!kernel_can(&d)) {
        printf("SKIP: this kernel cannot collapse shared memory (huge_error %llu)\n",
               (unsigned long long)tt_stat(&d, "huge_error"));
        atomic_store(phase, 8);
        tt_wait_ok(pid, 10000);
        tt_daemon_stop(&d);
        return 77;
    }
    CHECK_GE(ranges, RANGES - 1);
    CHECK_LE(ranges, RANGES);
    uint64_t huge = wait_at_least(&d, "bytes_huge", ranges * HUGE, 5000);
    CHECK_EQ(huge, ranges * HUGE); /* the kernel's figure (tcmd's smaps) */
    printf("collapse: %llu ranges in the client's 47 MiB\n", (unsigned long long)ranges);

    /* the client's own mapping: large pages, most of what it maps */
    atomic_store(phase, 2);
    wait_phase(3);
    uint64_t rss = atomic_load(rss_kb), pmd = atomic_load(pmd_kb);
    printf("client smaps: ShmemPmdMapped %llu kB of Rss %llu kB\n", (unsigned long long)pmd, (unsigned long long)rss);
    CHECK_GE(pmd * 10, rss * 8);

    /* a restart keeps them: the hint names them, nothing split */
    tt_daemon_kill(&d);
    tt_daemon_restart(&d, args, NULL);
    CHECK_EQ(tt_stat(&d, "huge_ranges"), ranges);
    CHECK_EQ(wait_at_least(&d, "bytes_huge", ranges * HUGE, 10000), ranges * HUGE);
    CHECK_EQ(tt_stat(&d, "huge_collapses"), 0); /* mapped again, not collapsed again */

    /* one run in SPACED freed: at most 40 pages of a collapsed range free,
     * which is not sparse (pageheap.c, HUGE_SPARSE_PAGES). The decay (a
     * quiet spell of decay_ms) punches none of it */
    uint64_t committed = tt_stat(&d, "bytes_committed");
    atomic_store(phase, 4);
    wait_phase(5);
    uint64_t decays = tt_stat(&d, "decays");
    usleep(2500000); /* decay_ms and the heap thread's longest sleep: the quiet spell's decay is done */
    CHECK_GT(tt_stat(&d, "decays"), decays);
    CHECK_EQ(tt_stat(&d, "huge_ranges"), ranges);
    CHECK_EQ(tt_stat(&d, "huge_splits"), 0);
    CHECK_EQ(tt_stat(&d, "huge_dissolved"), 0);
    CHECK_GE(tt_stat(&d, "bytes_committed") + HUGE, ranges * HUGE);
    printf("one run in 7 freed: %llu of %llu bytes still committed after a decay, no range split\n",
           (unsigned long long)tt_stat(&d, "bytes_committed"), (unsigned long long)committed);

    /* a release is pressure: it splits, and counts */
    CHECK_EQ(tt_tcmctl(&d, "release", out, sizeof out), 0);
    uint64_t splits = tt_stat(&d, "huge_splits");
    CHECK_GE(splits, RUNS / SPACED - 2); /* each freed run inside a collapsed range split it */
    CHECK_EQ(tt_stat(&d, "huge_ranges"), ranges - splits);
    CHECK_LE(tt_stat(&d, "bytes_committed"), committed - RUNS / SPACED * RUN + 2 * HUGE);
    printf("release: %llu ranges split, %llu bytes committed\n", (unsigned long long)splits,
           (unsigned long long)tt_stat(&d, "bytes_committed"));

    /* huge_collapse_ms 0: the rest is never collapsed again */
    CHECK_EQ(tt_tcmctl(&d, "config set huge_collapse_ms 0", out, sizeof out), 0);
    uint64_t collapses = tt_stat(&d, "huge_collapses");
    usleep(1500000); /* 30 looks at the heap */
    CHECK_EQ(tt_stat(&d, "huge_collapses"), collapses);

    /* everything freed: what is left goes back whole */
    atomic_store(phase, 6);
    wait_phase(7);
    for (int t = 0; t < 10000 && tt_stat(&d, "bytes_committed") > committed / 20; t += 20)
        usleep(20000);
    CHECK_LE(tt_stat(&d, "bytes_committed"), committed / 20);
    CHECK_EQ(tt_stat(&d, "huge_ranges"), 0);
    CHECK_EQ(tt_stat(&d, "bytes_huge"), 0);
    atomic_store(phase, 8);
    tt_wait_ok(pid, 10000);
    tt_check_heap(&d);
    tt_daemon_stop(&d);
    puts("huge: ok");
    return 0;
}
