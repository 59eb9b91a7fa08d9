/* Chaos soak: for SECONDS (argv[1]; the suite runs a short one,
 * scripts/chaos.sh a long one), random hostile actions (tcm-hostile's
 * modes), SIGKILLs of ordinary clients and SIGKILLs of tcmd, all at once,
 * under the shared multi-process workload (tagged objects of every size
 * handed between processes; a worker aborts on a corrupt or doubly handed
 * out object). Seeded (argv[2]): the same actions at the same instants.
 * Afterwards: every restart's recovery validated clean, no workload
 * allocation failed, no object corrupt or doubled, every byte accounted
 * for, the validator clean, and after release the heap back under 5% of
 * its peak. The killed ordinary clients held only cached objects, all
 * reclaimed; a client that shrinks or punches its channel loses what its
 * caches listed (orphaned, by design: see DESIGN "Threat model"), so the
 * only bytes left are those, within what its caches held. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"
#include "workload.h"

#define WORKERS 3
#define ATTACKERS 8 /* at most this many tcm-hostile processes at once */

typedef struct attacker {
    pid_t pid;
    int in;       /* its stdin: closed (EOF) when its time is up */
    int out;      /* its stdout, for "ready" ("hold" only; -1 otherwise) */
    double until; /* ms */
    bool kill;    /* SIGKILLed then, rather than told to go */
} attacker_t;

static tcm_test_daemon_t d;
static attacker_t att[ATTACKERS];
/* Attackers that wrecked their own caches (garbage over them) or channel
 * (shrunk, punched): what their caches listed is lost to them. */
static uint64_t breakers;
#define BREAKER_LOSS (1u << 20) /* at most what one's caches list (warm-up: 1000 x 64 B), and its spans */
static uint64_t seed;

static uint64_t rnd(void)
{
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return seed >> 33;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The modes that act by themselves; the channel resizes only where tcmd
 * owns SIGBUS (not under a sanitizer's runtime). */
static const char *const modes[] = {
    "hold", "hold", "hold", "garbage", "push-dead", "churn-closed", "roots",
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    "truncate", "grow", "punch",
#endif
};
#define NMODES (sizeof modes / sizeof modes[0])

static void launch(attacker_t *a, const char *mode, double ms)
{
    char path[512], secs[32];
    int in[2], out[2];
    bool hold = strcmp(mode, "hold") == 0;
    CHECK_EQ(pipe2(in, O_CLOEXEC), 0); /* later attackers must not hold its write end */
    CHECK_EQ(pipe2(out, O_CLOEXEC), 0);
    snprintf(secs, sizeof secs, "%.2f", ms / 1000);
    a->pid = fork();
    CHECK(a->pid >= 0);
    if (a->pid == 0) {
        dup2(in[0], 0);
        int null = open("/dev/null", O_WRONLY);
        dup2(hold ? out[1] : null, 1); /* the others' "ready" goes nowhere: nobody waits for it */
        close(null);
        execl(tt_path("tcm-hostile", path, sizeof path), "tcm-hostile", mode, secs, (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    a->out = out[0];
    if (!hold) {
        close(a->out);
        a->out = -1;
    }
    fprintf(stderr, "chaos: pid %d %s for %.0f ms\n", (int)a->pid, mode, ms);
    a->in = in[1];
    a->until = now_ms() + ms;
    /* an ordinary client holding only cached objects dies by SIGKILL; the
     * others are let go (a SIGKILL mid-warm-up would orphan what it had in
     * use, which is a loss by design, not one to look for here) */
    a->kill = hold;
    breakers += strcmp(mode, "truncate") == 0 || strcmp(mode, "punch") == 0 || strcmp(mode, "garbage") == 0;
}

/* Attackers whose time is up: killed or let go, and waited for. */
static void retire(bool all)
{
    for (int i = 0; i < ATTACKERS; i++) {
        attacker_t *a = &att[i];
        if (!a->pid || (!all && now_ms() < a->until))
            continue;
        if (a->kill) { /* once it holds nothing in use: after its "ready" */
            char c;
            while (read(a->out, &c, 1) == 1 && c != '\n')
                ;
            kill(a->pid, SIGKILL);
        }
        if (a->out >= 0)
            close(a->out);
        close(a->in);
        int st = tt_wait(a->pid, 60000);
        (void)st; /* a resize attacker may die of its own SIGBUS */
        a->pid = 0;
    }
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 20;
    seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 20261202;
    signal(SIGPIPE, SIG_IGN);
    wl_shared_t *wl = wl_shared();
    tt_daemon_start(&d, NULL);
    pid_t pids[WORKERS];
    wl_start(wl, WORKERS, pids, 2000);
    uint64_t peak = 0, restarts = 0, attacks = 0, kills = 0;
    double end = now_ms() + seconds * 1000;
    while (now_ms() < end) {
        usleep((useconds_t)(2000 + rnd() % 60000));
        uint64_t committed = tt_stat(&d, "bytes_committed");
        peak = committed > peak ? committed : peak;
        unsigned action = (unsigned)(rnd() % 10);
        if (action == 0) { /* tcmd dies and comes back */
            tt_daemon_kill(&d);
            tt_daemon_restart(&d, NULL, NULL);
            restarts++;
            CHECK_EQ(tt_stat(&d, "restarts"), restarts);
            CHECK_EQ(tt_stat(&d, "validation_failures"), 0);
        } else { /* a new attacker, or an ordinary client to kill */
            for (int i = 0; i < ATTACKERS; i++)
                if (!att[i].pid) {
                    const char *mode = modes[rnd() % NMODES];
                    launch(&att[i], mode, 100 + (double)(rnd() % 1500));
                    attacks++;
                    kills += att[i].kill;
                    break;
                }
        }
        retire(false);
    }
    retire(true);
    wl_wait_ops(wl, 300); /* the workers still work */
    CHECK_EQ(wl_stop(wl, WORKERS, pids), 0);
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 10000), 0);
    uint64_t orphaned = tt_stat(&d, "bytes_orphaned");
    CHECK_EQ(tt_stat(&d, "bytes_clients"), orphaned); /* nothing held by anyone alive */
    CHECK_LE(orphaned, breakers * BREAKER_LOSS);
    tt_check_heap(&d);
    char out[1024];
    CHECK_EQ(tt_tcmctl(&d, "release", out, sizeof out), 0);
    uint64_t after = tt_stat(&d, "bytes_committed");
    printf("chaos: %.0f s, %llu tcmd kills, %llu attackers (%llu ordinary clients SIGKILLed, %llu wrecked their own "
           "caches or channel: %llu bytes orphaned), %llu workload operations, %llu objects handed between processes; "
           "committed %llu of a %llu peak after release\n",
           seconds, (unsigned long long)restarts, (unsigned long long)attacks, (unsigned long long)kills,
           (unsigned long long)breakers, (unsigned long long)orphaned,
           (unsigned long long)atomic_load(&wl->ops), (unsigned long long)atomic_load(&wl->handed_over),
           (unsigned long long)after, (unsigned long long)peak);
    CHECK_LT(after, peak / 20 + breakers * BREAKER_LOSS);
    tt_daemon_stop(&d);
    return 0;
}
