/* Separate (exec'd) processes on one heap: one allocates objects of every
 * class boundary and large runs, publishes them through a root; another
 * verifies and frees them. Live objects of different processes never
 * overlap, and afterwards the daemon has every byte back. */
#define _GNU_SOURCE
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"

static pid_t spawn(const char *mode, const char *root, const char *root2)
{
    char helper[256];
    tt_path("tcm_test_helper", helper, sizeof helper);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        execl(helper, helper, mode, root, root2, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void test_processes(void)
{
    tcm_test_daemon_t d;
    tt_daemon_start(&d, NULL);

    /* this process holds live objects of its own while the others run */
    CHECK_EQ(tcm_init(d.socket), 0);
    enum { MINE = 3000 };
    struct { uint64_t n, producer; struct { uint64_t off, size; } e[MINE]; } *mine = tcm_malloc(sizeof *mine);
    mine->n = MINE;
    mine->producer = (uint64_t)getpid();
    uint64_t mine_bytes = 0;
    for (int i = 0; i < MINE; i++) {
        size_t s = 1 + (size_t)(i * 37) % (i % 50 ? 5000 : 600000);
        unsigned char *p = tcm_malloc(s);
        for (size_t k = 0; k < s; k++)
            p[k] = (unsigned char)(i * 131 + k * 7 + 1); /* the helper's pattern */
        mine->e[i].off = tcm_to_offset(p);
        mine->e[i].size = s;
        mine_bytes += s;
    }
    CHECK_EQ(tcm_root_set("mine", mine), 0);

    tt_wait_ok(spawn("produce", "shared", NULL), 60000);
    tt_wait_ok(spawn("disjoint", "shared", "mine"), 60000);
    /* the producer has gone: what it allocated is in use by nobody attached */
    uint64_t orphaned = tt_stat(&d, "bytes_orphaned");
    CHECK_GT(orphaned, 0);
    tt_wait_ok(spawn("consume", "shared", NULL), 60000);
    CHECK(tcm_root_get("shared") == NULL);
    CHECK_EQ(tt_stat(&d, "bytes_orphaned"), 0); /* freed by the consumer */

    /* objects this process allocated and another process freed are credited
     * back to this process, not to the one that freed them */
    uint64_t held_before = 0, held_after = 0;
    CHECK_EQ(tt_clients(&d, getpid(), &held_before, NULL, NULL), 1);
    CHECK_GE(held_before, mine_bytes);
    tt_wait_ok(spawn("consume", "mine", NULL), 60000);
    tt_clients(&d, getpid(), &held_after, NULL, NULL);
    CHECK_GE(held_before - held_after, mine_bytes);
    CHECK(tcm_root_get("mine") == NULL); /* the consumer freed the table too */
    tcm_shutdown();

    /* everything is back: nothing held by any client, nothing refused */
    tt_check_all_back(&d);
    CHECK_GE(tt_stat(&d, "clients_total"), 5);
    tt_daemon_stop(&d);
}

int main(void)
{
    static const tt_case_t cases[] = {{"processes on one heap", test_processes}};
    return tt_run_cases("multiproc", cases, 1, 240000) != 0;
}
