/* Owner tags across more than 63 reuses of one client record (issue 20).
 * A tag is the record index and a 6-bit generation of it; objects of a
 * departed client keep its tag. Short-lived clients attach one after the
 * other (each in the same free record) and each leaves a page run allocated
 * when it goes: after 63 of them the generation would come back to the
 * first one's, and the new client would own the first one's run. Each
 * client checks, while attached, that the validator is clean and that
 * `tcmctl clients` credits it with its own run only, also once it has freed
 * the run of the client 63 before it (given back with tcmctl release).
 * tcmd is killed and restarted half-way. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"

#define CLIENTS 70
#define GENS 63                           /* generations of a record */
#define RUN (40 * 8192)                   /* a page run: exact pages, its bytes are what is counted */

static tcm_test_daemon_t d;

typedef struct shared {
    uint64_t runs[CLIENTS]; /* each client's run, 0 once freed */
} shared_t;

static shared_t *sh;

static uint64_t orphaned_runs(int upto)
{
    uint64_t n = 0;
    for (int i = 0; i < upto; i++)
        n += sh->runs[i] != 0;
    return n;
}

static int short_lived(void *arg)
{
    int i = (int)(intptr_t)arg;
    CHECK_EQ(tcm_init(NULL), 0);
    tt_check_heap(&d); /* its tag owns nothing of its predecessors' */
    uint64_t held = 1;
    tt_clients(&d, getpid(), &held, NULL, NULL);
    CHECK_EQ(held, 0);
    void *p = tcm_malloc(RUN);
    CHECK(p != NULL);
    tt_clients(&d, getpid(), &held, NULL, NULL);
    CHECK_EQ(held, RUN);
    if (i >= GENS) {
        /* the run of the client that had this record GENS clients ago: it
         * goes to this process's run cache, then back to tcmd, and is
         * credited to its owner, not to this client */
        uint64_t old = sh->runs[i - GENS];
        sh->runs[i - GENS] = 0;
        tcm_free(tcm_from_offset(old));
        char out[512];
        CHECK_EQ(tt_tcmctl(&d, "release", out, sizeof out), 0);
        uint64_t want = orphaned_runs(i) * RUN;
        CHECK_EQ(tt_wait_stat(&d, "bytes_orphaned", want, 10000), want);
        tt_clients(&d, getpid(), &held, NULL, NULL);
        CHECK_EQ(held, RUN);
        tt_check_heap(&d);
    }
    sh->runs[i] = tcm_to_offset(p);
    tcm_shutdown(); /* the run stays allocated: orphaned */
    return 0;
}

int main(void)
{
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED);
    /* no heap profile: a sampling thread keeps a run for its next sample,
     * which would be in what each client holds */
    const char *args[] = {"--profile-sample", "0", NULL};
    tt_daemon_start(&d, args);
    for (int i = 0; i < CLIENTS; i++) {
        /* one at a time, each gone before the next: each finds the same
         * record free (the lowest) */
        tt_wait_ok(tt_fork(short_lived, (void *)(intptr_t)i), 60000);
        CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
        CHECK_EQ(tt_stat(&d, "bytes_orphaned"), orphaned_runs(i + 1) * RUN);
        if (i == GENS / 2) { /* a new tcmd must know from the owner map which tags still own runs */
            tt_daemon_kill(&d);
            tt_daemon_restart(&d, NULL, NULL);
        }
    }
    tt_check_heap(&d);
    CHECK_EQ(tcm_init(d.socket), 0);
    for (int i = 0; i < CLIENTS; i++)
        if (sh->runs[i])
            tcm_free(tcm_from_offset(sh->runs[i]));
    tcm_shutdown();
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0);
    CHECK_EQ(tt_stat(&d, "bytes_orphaned"), 0);
    printf("ownertags: %d clients in turn, %d generations a record: clean\n", CLIENTS, GENS);
    tt_daemon_stop(&d);
    return 0;
}
