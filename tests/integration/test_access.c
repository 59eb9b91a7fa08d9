/* Clients of another user, let in by --allow-group, get the segments as
 * descriptors: the heap read-write, the metadata read-only. Checked from
 * such a client: it allocates and frees, it cannot open any segment by
 * name, cannot make its metadata mapping writable, dies writing to it, and
 * rides through a tcmd restart like any client. A process outside the
 * group cannot attach. A member's roots count in its own share and it
 * cannot change another user's. Needs root (to change users); skipped otherwise. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"

#define NOBODY 65534
#define GROUP 65534

static tcm_test_daemon_t d;
static _Atomic int *phase;

static void become(uid_t uid, gid_t gid)
{
    gid_t groups[1] = {gid};
    CHECK_EQ(setgroups(1, groups), 0);
    CHECK_EQ(setgid(gid), 0);
    CHECK_EQ(setuid(uid), 0);
}

/* The metadata mapping of this process, from /proc/self/maps. */
static void *find_mapping(const char *suffix, char perms[5])
{
    char want[128], line[512];
    snprintf(want, sizeof want, "/dev/shm/tcm.%s.%s", d.name, suffix);
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    void *addr = NULL;
    while (fgets(line, sizeof line, f))
        if (strstr(line, want)) {
            unsigned long lo;
            CHECK_EQ(sscanf(line, "%lx-%*x %4s", &lo, perms), 2);
            addr = (void *)lo;
            break;
        }
    fclose(f);
    return addr;
}

static int write_meta(void *arg)
{
    signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would turn the fault into an exit */
    *(volatile char *)arg = 1; /* must fault */
    return 0;
}

static int outsider(void *arg)
{
    (void)arg;
    become(NOBODY, GROUP - 1);
    CHECK_NE(tcm_init(d.socket), 0);
    return 0;
}

static int member(void *arg)
{
    (void)arg;
    become(NOBODY, GROUP);
    CHECK_EQ(tcm_init(d.socket), 0);
    void *p[1000];
    for (int i = 0; i < 1000; i++)
        CHECK((p[i] = tcm_malloc(16 + i * 37)) != NULL);
    void *big = tcm_malloc(3 << 20);
    CHECK(big != NULL);
    memset(big, 7, 3 << 20);

    const char *suffixes[] = {"meta", "state", "heap", "lock"};
    for (int i = 0; i < 4; i++) {
        char path[128];
        snprintf(path, sizeof path, "/dev/shm/tcm.%s.%s", d.name, suffixes[i]);
        errno = 0;
        CHECK_EQ(open(path, O_RDWR), -1);
        CHECK_EQ(errno, EACCES);
        CHECK_EQ(open(path, O_RDONLY), -1);
    }
    char perms[5] = "";
    void *meta = find_mapping("meta", perms);
    CHECK(meta != NULL);
    CHECK_EQ(perms[1], '-'); /* r--s */
    CHECK_EQ(perms[3], 's');
    errno = 0;
    CHECK_EQ(mprotect(meta, 4096, PROT_READ | PROT_WRITE), -1);
    CHECK_EQ(errno, EACCES);
    int st = tt_wait(tt_fork(write_meta, meta), 10000);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    void *heap = find_mapping("heap", perms);
    CHECK(heap != NULL && perms[1] == 'w');
    /* the heap profile is the operator's: other processes' code addresses defeat their ASLR */
    char out[1024];
    CHECK_NE(tt_tcmctl(&d, "heap-profile --top 5", out, sizeof out), 0);
    CHECK(strstr(out, "heap-profile") != NULL);

    /* ride through a restart, then give everything back */
    atomic_store(phase, 1);
    while (atomic_load(phase) != 2)
        usleep(1000);
    tcm_free(big);
    CHECK((big = tcm_malloc(5 << 20)) != NULL); /* a page run: needs the new tcmd */
    tcm_free(big);
    for (int i = 0; i < 1000; i++)
        tcm_free(p[i]);
    tcm_shutdown();
    return 0;
}

static void test_other_user(void)
{
    phase = mmap(NULL, sizeof *phase, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(phase != MAP_FAILED);
    const char *args[] = {"--allow-group", "65534", NULL};
    tt_daemon_start(&d, args);
    tt_wait_ok(tt_fork(outsider, NULL), 20000);
    pid_t pid = tt_fork(member, NULL);
    for (int t = 0; atomic_load(phase) != 1; t++) {
        if (t > 30000 || waitpid(pid, NULL, WNOHANG) == pid) {
            fprintf(stderr, "the member client died or stalled before the restart\n");
            abort();
        }
        usleep(1000);
    }
    tt_daemon_kill(&d);
    tt_daemon_restart(&d, args, NULL);
    atomic_store(phase, 2);
    tt_wait_ok(pid, 30000);
    CHECK_EQ(tt_stat(&d, "clients_resumed"), 1);
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0);
    tt_check_heap(&d);
    tt_daemon_stop(&d);
}

/* A member fills its share of roots and leaves; it cannot change root's.
 * (The tree before: one process filled the whole ownerless table, and
 * every later tcm_root_set anywhere got ENOSPC.) */
static int roots_member(void *arg)
{
    (void)arg;
    become(NOBODY, GROUP);
    void *p = tcm_malloc(64);
    CHECK(p != NULL);
    char name[32];
    int i, err = 0;
    for (i = 0; i < 100 && !err; i++) {
        snprintf(name, sizeof name, "member.%d", i);
        err = tcm_root_set(name, p);
    }
    CHECK_EQ(err, -EDQUOT);
    CHECK_EQ(i - 1, 8); /* --roots-per-uid 8 */
    CHECK(tcm_root_get("operator.table") != NULL);
    CHECK_EQ(tcm_root_set("operator.table", p), -EPERM);
    CHECK_EQ(tcm_root_replace("operator.table", tcm_root_get("operator.table"), NULL), -EPERM);
    CHECK_EQ(tcm_root_create("operator.table", p), -EEXIST);
    return 0; /* its roots stay: it published them */
}

static void test_roots_share(void)
{
    const char *args[] = {"--allow-group", "65534", "--roots-per-uid", "8", NULL};
    tt_daemon_start(&d, args);
    CHECK_EQ(tcm_init(d.socket), 0);
    void *mine = tcm_malloc(64);
    CHECK_EQ(tcm_root_create("operator.table", mine), 0);
    tt_wait_ok(tt_fork(roots_member, NULL), 20000);
    CHECK(tcm_root_get("operator.table") == mine); /* untouched */
    CHECK(tcm_root_get("member.3") != NULL);
    CHECK_EQ(tcm_root_create("operator.more", mine), 0); /* root's share is its own */
    CHECK_EQ(tcm_root_set("member.3", NULL), 0);          /* the operator may remove a member's */
    CHECK(tcm_root_get("member.3") == NULL);
    char out[1 << 14];
    CHECK_EQ(tt_tcmctl(&d, "roots", out, sizeof out), 0);
    CHECK(strstr(out, "member.7") != NULL && strstr(out, "operator.more") != NULL);
    tt_check_heap(&d);
    /* a restart counts the shares again from the table */
    tt_daemon_kill(&d);
    tt_daemon_restart(&d, args, NULL);
    tt_check_heap(&d);
    for (int i = 0; i < 8; i++) {
        char name[32];
        snprintf(name, sizeof name, "member.%d", i);
        tcm_root_set(name, NULL);
    }
    tcm_root_set("operator.table", NULL);
    tcm_root_set("operator.more", NULL);
    tcm_free(mine);
    tcm_shutdown();
    tt_daemon_stop(&d);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("access: skipped (needs root to run clients as another user)\n");
        return 77;
    }
    static const tt_case_t cases[] = {{"a member of --allow-group", test_other_user},
                                      {"each user's share of roots", test_roots_share}};
    return tt_run_cases("access", cases, 2, 120000) != 0;
}
