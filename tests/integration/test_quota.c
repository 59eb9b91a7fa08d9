/* Memory quotas (DESIGN.md, "Memory quotas"), with real processes:
 *
 *  - producer/consumer: a producer under a 64 MiB quota (a rule for its
 *    user and name) hands 1 GiB, object by object, to a consumer process
 *    that frees everything; the producer never gets NULL, although what
 *    the consumer caches of its objects counts against it (tcmd asks the
 *    consumer to give it back), and what it is charged never passes 64 MiB;
 *  - over its quota: a process named "hog" gets ENOMEM past its 32 MiB
 *    (at most that much held, at least that less a cache budget), quickly
 *    once tcmd knows nothing is coming back, while another process goes on
 *    allocating; under the drop-in (shared heap) its fallback serves it;
 *  - what a departed process left counts for its user and name, through a
 *    tcmd restart, until another process frees it;
 *  - uid_quota: another user is held to it, root is not (root only).
 *
 * Figures: tcmctl quota's held and refused. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "prim.h"
#include "tcm.h"
#include "testutil.h"

#define MIB (1ull << 20)
#define NOBODY 65534

static tcm_test_daemon_t d;

/* A quota's held and refused, from tcmctl --json quota ("" name: the
 * user's row); false if it is not listed. */
static bool quota_of(unsigned uid, const char *name, uint64_t *held, uint64_t *refused)
{
    static char out[1 << 16];
    CHECK_EQ(tt_tcmctl(&d, "--json quota", out, sizeof out), 0);
    char key[96];
    snprintf(key, sizeof key, "{\"uid\":%u,\"name\":\"%s\",", uid, name);
    const char *p = strstr(out, key);
    if (!p)
        return false;
    const char *h = strstr(p, "\"bytes_held\":"), *r = strstr(p, "\"refused\":");
    CHECK(h && r);
    *held = strtoull(h + 13, NULL, 10);
    *refused = strtoull(r + 10, NULL, 10);
    return true;
}

static void quota_set(const char *who, const char *size)
{
    char cmd[128], out[4096];
    snprintf(cmd, sizeof cmd, size ? "quota set %s %s" : "quota clear %s", who, size);
    if (tt_tcmctl(&d, cmd, out, sizeof out) != 0) {
        fprintf(stderr, "tcmctl %s: %s\n", cmd, out);
        abort();
    }
}

static void named(const char *name)
{
    CHECK_EQ(prctl(PR_SET_NAME, name), 0);
    CHECK_EQ(tcm_init(d.socket), 0);
}

/* ---- producer and consumer ---- */

#define QCAP (60u * 1024u) /* objects in flight at most: 60 MiB of 1 KiB */
#define BURST (8u * 1024u) /* the consumer takes a break after each 8 MiB: the queue fills meanwhile */
#define OBJ 1024u
#define TOTAL_BYTES (1ull << 30)

typedef struct queue {
    _Atomic uint64_t head, tail;
    _Atomic uint64_t max_held;
    _Atomic int failed;
    uint64_t off[QCAP];
} queue_t;
static queue_t *qu;

static int producer(void *arg)
{
    (void)arg;
    named("producer");
    for (uint64_t i = 0; i < TOTAL_BYTES / OBJ; i++) {
        while (atomic_load(&qu->head) - atomic_load(&qu->tail) == QCAP)
            usleep(50);
        uint64_t *p = tcm_malloc(OBJ);
        if (!p) {
            fprintf(stderr, "producer: malloc %llu of %llu failed: %s\n", (unsigned long long)i,
                    (unsigned long long)(TOTAL_BYTES / OBJ), strerror(errno));
            atomic_store(&qu->failed, 1);
            return 1;
        }
        p[0] = i, p[OBJ / 8 - 1] = ~i;
        uint64_t h = atomic_load(&qu->head);
        qu->off[h % QCAP] = tcm_to_offset(p);
        atomic_store(&qu->head, h + 1);
    }
    tcm_shutdown();
    return 0;
}

static int consumer(void *arg)
{
    (void)arg;
    named("consumer");
    for (uint64_t i = 0; i < TOTAL_BYTES / OBJ; i++) {
        uint64_t t = atomic_load(&qu->tail);
        while (atomic_load(&qu->head) == t) {
            if (atomic_load(&qu->failed))
                return 1;
            usleep(50);
        }
        uint64_t *p = tcm_from_offset(qu->off[t % QCAP]);
        CHECK_EQ(p[0], i);
        CHECK_EQ(p[OBJ / 8 - 1], ~i);
        tcm_free(p);
        atomic_store(&qu->tail, t + 1);
        if (i % BURST == BURST - 1)
            usleep(20000);
    }
    tcm_shutdown();
    return 0;
}

static void producer_consumer(void)
{
    char who[64];
    snprintf(who, sizeof who, "%u:producer", (unsigned)getuid());
    quota_set(who, "64M");
    qu = mmap(NULL, sizeof *qu, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(qu != MAP_FAILED);
    uint64_t refusals0 = tt_stat(&d, "quota_refusals");
    pid_t c = tt_fork(consumer, NULL), p = tt_fork(producer, NULL);
    uint64_t max_held = 0, held, refused;
    for (int alive = 2; alive;) {
        if (quota_of(getuid(), "producer", &held, &refused) && held > max_held)
            max_held = held;
        alive = 0;
        pid_t pids[2] = {c, p};
        for (int i = 0; i < 2; i++) {
            int st;
            if (!pids[i])
                continue;
            if (waitpid(pids[i], &st, WNOHANG) == 0) {
                alive++;
                continue;
            }
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            *(i ? &p : &c) = 0;
        }
        usleep(20000);
    }
    CHECK_EQ(atomic_load(&qu->failed), 0);
    CHECK_EQ(atomic_load(&qu->tail), TOTAL_BYTES / OBJ);
    CHECK(quota_of(getuid(), "producer", &held, &refused));
    uint64_t refusals = tt_stat(&d, "quota_refusals") - refusals0;
    CHECK_GE(refusals, 1); /* the queue and the consumer's caches reached the quota */
    printf("quota: producer handed %llu MiB under a 64 MiB quota: held at most %.1f MiB seen, %llu refusals "
           "(each answered by the consumer's caches coming back), never NULL\n",
           (unsigned long long)(TOTAL_BYTES / MIB), (double)max_held / MIB, (unsigned long long)refusals);
    CHECK_LE(max_held, 64 * MIB);
    CHECK_EQ(held, 0);
    quota_set(who, NULL);
    munmap(qu, sizeof *qu);
}

/* ---- over its quota ---- */

typedef struct hog_result {
    uint64_t got;   /* bytes allocated before the first NULL */
    int err;        /* errno of that NULL */
    uint64_t fail_ns; /* the next 20 failures took */
} hog_result_t;
static hog_result_t *hr;
static _Atomic int *hog_state; /* 1: full, holding; 2: may go */

static int hog(void *arg)
{
    (void)arg;
    named("hog");
    void **blocks = calloc(4096, sizeof *blocks);
    size_t n = 0;
    while (n < 4096 && (blocks[n] = tcm_malloc(64 * 1024)) != NULL)
        memset(blocks[n++], 1, 64 * 1024);
    hr->got = n * 64 * 1024;
    hr->err = errno;
    uint64_t t0 = tcm__now_ns();
    for (int i = 0; i < 20; i++)
        CHECK(tcm_malloc(64 * 1024) == NULL);
    hr->fail_ns = tcm__now_ns() - t0;
    atomic_store(hog_state, 1);
    while (atomic_load(hog_state) != 2)
        usleep(1000);
    for (size_t i = 0; i < n; i++)
        tcm_free(blocks[i]);
    free(blocks);
    tcm_shutdown();
    return 0;
}

static int bystander(void *arg)
{
    (void)arg;
    named("bystander");
    void **blocks = calloc(2048, sizeof *blocks);
    for (int i = 0; i < 2048; i++) { /* 128 MiB */
        blocks[i] = tcm_malloc(64 * 1024);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 2, 64 * 1024);
    }
    for (int i = 0; i < 2048; i++)
        tcm_free(blocks[i]);
    free(blocks);
    tcm_shutdown();
    return 0;
}

static int bigrun(void *arg)
{
    (void)arg;
    named("bigrun");
    CHECK(tcm_malloc(64 * MIB) == NULL); /* refused before tcmd commits any of it (a run in steps) */
    CHECK_EQ(errno, ENOMEM);
    void *p = tcm_malloc(8 * MIB);
    CHECK(p != NULL);
    tcm_free(p);
    tcm_shutdown();
    return 0;
}

static void over_quota(void)
{
    char who[64];
    snprintf(who, sizeof who, "%u:hog", (unsigned)getuid());
    quota_set(who, "32M");
    pid_t h = tt_fork(hog, NULL);
    for (int t = 0; atomic_load(hog_state) != 1; t++) {
        CHECK_LT(t, 30000);
        usleep(1000);
    }
    tt_wait_ok(tt_fork(bystander, NULL), 60000); /* goes on while the hog is at its quota */
    uint64_t held, refused;
    CHECK(quota_of(getuid(), "hog", &held, &refused));
    printf("quota: hog got %.1f MiB under 32 MiB (ENOMEM: %s), holds %.1f MiB, %llu refused; 20 more failures "
           "took %.1f ms\n",
           (double)hr->got / MIB, hr->err == ENOMEM ? "yes" : "no", (double)held / MIB,
           (unsigned long long)refused, (double)hr->fail_ns / 1e6);
    CHECK_EQ(hr->err, ENOMEM);
    CHECK_LE(held, 32 * MIB);
    CHECK_LE(hr->got, 32 * MIB);
    CHECK_GE(hr->got, 24 * MIB); /* what its own caches held came back to it first */
    CHECK_GE(refused, 21);
    CHECK_LT(hr->fail_ns, 2000000000ull); /* not a wait for flushes each time */
    atomic_store(hog_state, 2);
    tt_wait_ok(h, 30000);
    CHECK(quota_of(getuid(), "hog", &held, &refused));
    CHECK_EQ(held, 0);
    quota_set(who, NULL);

    snprintf(who, sizeof who, "%u:bigrun", (unsigned)getuid());
    quota_set(who, "16M");
    tt_wait_ok(tt_fork(bigrun, NULL), 30000);
    CHECK(quota_of(getuid(), "bigrun", &held, &refused));
    CHECK_GE(refused, 1);
    quota_set(who, NULL);

#ifdef TCM_MALLOC_PATH
    /* a real program under the drop-in, on the shared heap: what its quota
     * refuses, the system malloc serves (64 MiB of bytearrays under 16).
     * (Not a python3 on PATH, which may be a shell script: a shell's fork
     * children write over its objects in the shared mode, README says.) */
    if (access("/usr/bin/python3", X_OK) != 0) {
        printf("quota: no /usr/bin/python3: the drop-in part skipped\n");
        return;
    }
    snprintf(who, sizeof who, "%u:python3", (unsigned)getuid());
    quota_set(who, "16M");
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd,
             "TCM_SOCKET=%s TCM_MALLOC_FORK=shared LD_PRELOAD=%s /usr/bin/python3 -c "
             "'b = [bytearray(65536) for i in range(1024)]; print(sum(len(x) for x in b))' 2>&1",
             d.socket, TCM_MALLOC_PATH);
    int rc = tt_run(cmd, out, sizeof out);
    CHECK(quota_of(getuid(), "python3", &held, &refused));
    printf("quota: python3 under the drop-in, 64 MiB under a 16 MiB quota: exit %d, %llu refused, said: %s", rc,
           (unsigned long long)refused, out);
    CHECK_EQ(rc, 0);
    CHECK(strstr(out, "67108864") != NULL);
    CHECK(strstr(out, "quota") != NULL); /* the drop-in says why it went on with the system malloc */
    CHECK_GE(refused, 1);
    CHECK_LE(held, 16 * MIB);
    quota_set(who, NULL);
#endif
}

/* ---- departed ---- */

static int leaver(void *arg)
{
    (void)arg;
    named("leaver");
    for (int i = 0; i < 12; i++) {
        char name[16];
        snprintf(name, sizeof name, "left%d", i);
        void *p = tcm_malloc(MIB);
        CHECK(p != NULL);
        CHECK_EQ(tcm_root_set(name, p), 0);
    }
    tcm_shutdown();
    return 0; /* its 12 MiB stay allocated */
}

static int second_leaver(void *arg)
{
    (void)arg;
    named("leaver");
    uint64_t got = 0;
    void *p;
    while ((p = tcm_malloc(MIB)) != NULL)
        got += MIB;
    CHECK_LE(got, 4 * MIB);
    return 0; /* leaves it allocated too */
}

static int freer(void *arg)
{
    (void)arg;
    named("freer");
    for (int i = 0; i < 12; i++) {
        char name[16];
        snprintf(name, sizeof name, "left%d", i);
        void *p = tcm_root_get(name);
        CHECK(p != NULL);
        tcm_free(p);
        CHECK_EQ(tcm_root_set(name, NULL), 0);
    }
    tcm_shutdown();
    return 0;
}

static void departed(void)
{
    char who[64];
    snprintf(who, sizeof who, "%u:leaver", (unsigned)getuid());
    quota_set(who, "16M");
    tt_wait_ok(tt_fork(leaver, NULL), 30000);
    uint64_t held, refused;
    CHECK(quota_of(getuid(), "leaver", &held, &refused));
    CHECK_GE(held, 12 * MIB);
    tt_wait_ok(tt_fork(second_leaver, NULL), 30000);
    tt_wait_stat(&d, "clients_attached", 0, 5000);
    /* tcmd dies; the next one counts it all again from the owner tags */
    tt_daemon_kill(&d);
    const char *args[] = {"--allow-group", "65534", "--heap-size", "4G", "--max-clients", "64", NULL};
    tt_daemon_restart(&d, args, NULL);
    CHECK(tt_log_contains(&d, "has 1024 client records: kept")); /* (max_clients is a new heap's) */
    uint64_t after;
    CHECK(quota_of(getuid(), "leaver", &after, &refused));
    printf("quota: a departed leaver's 12 MiB count for its name: %.1f MiB held before a tcmd restart, %.1f MiB "
           "after\n",
           (double)held / MIB, (double)after / MIB);
    CHECK_GE(after, 12 * MIB);
    CHECK_LE(after, 16 * MIB);
    tt_wait_ok(tt_fork(freer, NULL), 30000);
    CHECK(quota_of(getuid(), "leaver", &held, &refused));
    CHECK_EQ(held, after - 12 * MIB); /* what the second one left, if anything */
    quota_set(who, NULL);
}

/* ---- uid_quota ---- */

static int nobody_hog(void *arg)
{
    uint64_t quota = (uint64_t)(uintptr_t)arg;
    gid_t g = NOBODY;
    CHECK_EQ(setgroups(1, &g), 0);
    CHECK_EQ(setgid(NOBODY), 0);
    CHECK_EQ(setuid(NOBODY), 0);
    CHECK_EQ(tcm_init(d.socket), 0);
    uint64_t got = 0;
    while (got < 256 * MIB && tcm_malloc(MIB) != NULL)
        got += MIB;
    CHECK_EQ(errno, ENOMEM);
    CHECK_LE(got, quota);
    CHECK_GE(got, quota / 2); /* (its caches' share of it: tcache_budget is larger) */
    return 0;
}

static int root_big(void *arg)
{
    (void)arg;
    named("rootbig");
    for (int i = 0; i < 64; i++)
        CHECK(tcm_malloc(MIB) != NULL);
    return 0;
}

static void uid_quota(void)
{
    char out[4096];
    CHECK_EQ(tt_tcmctl(&d, "config set uid_quota 16M", out, sizeof out), 0);
    tt_wait_ok(tt_fork(nobody_hog, (void *)(uintptr_t)(16 * MIB)), 30000);
    tt_wait_ok(tt_fork(root_big, NULL), 30000);
    uint64_t held, refused;
    CHECK(quota_of(NOBODY, "", &held, &refused)); /* what it left, under the default */
    CHECK_GE(refused, 1);
    printf("quota: uid_quota 16M: nobody held to it (%llu refused, %.1f MiB left by it), root not\n",
           (unsigned long long)refused, (double)held / MIB);
    /* its own rule wins over the default: what it left counts */
    quota_set("nobody", "24M");
    tt_wait_ok(tt_fork(nobody_hog, (void *)(uintptr_t)(24 * MIB - held)), 30000);
    quota_set("nobody", NULL);
    CHECK_EQ(tt_tcmctl(&d, "config set uid_quota 0", out, sizeof out), 0);
}

int main(void)
{
    hog_state = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(hog_state != MAP_FAILED);
    hr = (hog_result_t *)(hog_state + 16);
    const char *args[] = {"--allow-group", "65534", "--heap-size", "4G", NULL};
    tt_daemon_start(&d, args);
    producer_consumer();
    over_quota();
    departed();
    if (geteuid() == 0)
        uid_quota();
    tt_daemon_stop(&d); /* (the validator, and the segments gone) */
    printf("quota: 1 passed, 0 failed\n");
    return 0;
}
