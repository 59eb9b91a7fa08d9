/* Sparse spans drain (docs/DESIGN.md, "Draining sparse spans"): once a
 * RETURN leaves a span more than a quarter free, tcmd marks its pages, and
 * frees of its objects go back to tcmd instead of into a thread cache, so
 * that no malloc hands them out again and the span empties.
 *
 * Each case: a child allocates 32 spans of 64-byte objects, frees all but
 * one object in 16, and so leaves its spans sparse. Then:
 *  - its frees of the kept objects never come back from a malloc (a bin
 *    would hand the last one freed straight back), and once all are freed
 *    the class is down to the few spans its bin holds;
 *  - killed while it holds such objects gathered for tcmd, tcmd takes them
 *    back: what is orphaned is exactly what the child still had in use;
 *  - a tcmd killed and restarted sets every page back to its class, and the
 *    heap checks clean. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "tcm_layout.h"
#include "testutil.h"

enum { SIZE = 64, CLS = 4, SPAN_OBJS = 1024, SPANS = 32, N = SPANS * SPAN_OBJS, KEEP_EVERY = 16 };
enum { KEPT = N / KEEP_EVERY, GATHERED = 10 }; /* GATHERED < tcm__drain_cap: they wait in the child */

static tcm_test_daemon_t daemon_;
static _Atomic int *phase; /* shared with the child */
static void *objs[N];

/* pid: the child the parent waits for, which must not have died (0: the
 * child waits for the parent) */
static void wait_phase(int want, pid_t pid)
{
    for (int t = 0; atomic_load(phase) < want; t++) {
        CHECK_LT(t, 60000);
        if (pid)
            CHECK_EQ(waitpid(pid, NULL, WNOHANG), 0);
        usleep(1000);
    }
}

/* the page-class byte of p, read through the metadata segment */
static unsigned page_class(const void *p)
{
    static const uint8_t *meta;
    if (!meta) {
        char pattern[160];
        glob_t g;
        snprintf(pattern, sizeof pattern, "/dev/shm/tcm.%s.meta", daemon_.name);
        CHECK_EQ(glob(pattern, 0, NULL, &g), 0);
        int fd = open(g.gl_pathv[0], O_RDONLY);
        CHECK_GE(fd, 0);
        globfree(&g);
        struct stat st;
        CHECK_EQ(fstat(fd, &st), 0);
        meta = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        CHECK(meta != MAP_FAILED);
        close(fd);
    }
    const tcm_meta_hdr_t *m = (const tcm_meta_hdr_t *)meta;
    uint64_t off = (uint64_t)((uintptr_t)p - m->base);
    CHECK_LT(off, m->heap_size);
    return meta[m->off_page_class + (off >> TCM_PAGE_SHIFT)];
}

/* 32 spans of the class, all but one object in 16 freed: sparse spans */
static int make_sparse(void)
{
    CHECK_EQ(tcm_init(daemon_.socket), 0);
    void *x = tcm_malloc(SIZE);
    tcm_free(x);
    CHECK(tcm_malloc(SIZE) == x); /* a bin hands back the last object freed */
    tcm_free(x);
    for (int i = 0; i < N; i++) {
        objs[i] = tcm_malloc(SIZE);
        CHECK(objs[i] != NULL);
    }
    for (int i = 0; i < N; i++)
        if (i % KEEP_EVERY)
            tcm_free(objs[i]);
    /* a round trip behind the batches those frees handed back quietly:
     * when it returns, tcmd has taken them and drained the spans they left
     * sparse (a restart must find the spans as they are now) */
    void *run = tcm_malloc(1 << 20);
    CHECK(run != NULL);
    tcm_free(run);
    int draining = 0;
    for (int i = 0; i < N; i += KEEP_EVERY) {
        unsigned pc = page_class(objs[i]);
        CHECK(pc == CLS || pc == TCM_PAGE_CLASS_DRAIN + CLS);
        draining += pc == TCM_PAGE_CLASS_DRAIN + CLS;
    }
    return draining;
}

/* the spans of the class, from `tcmctl classes` */
static unsigned class_spans(void)
{
    char out[16384];
    CHECK_EQ(tt_tcmctl(&daemon_, "classes", out, sizeof out), 0);
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        unsigned cls, size, pages, span_objs, spans;
        if (sscanf(line, "%u %u %u %u %u", &cls, &size, &pages, &span_objs, &spans) == 5 && cls == CLS)
            return spans;
    }
    CHECK(!"class 4 is in tcmctl classes");
    return 0;
}

/* A tcmd of the case's own and its child, once the child is at phase 1. */
static pid_t start(int (*child)(void *))
{
    tt_daemon_start(&daemon_, NULL);
    char out[512];
    /* a small cache, so that what the child frees reaches tcmd; no decay,
     * so that nothing but the frees moves objects */
    CHECK_EQ(tt_tcmctl(&daemon_, "config set tcache_budget 256K", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&daemon_, "config set decay_ms 0", out, sizeof out), 0);
    /* no heap profile: a sampled object has a page run of its own, not a
     * place in the class's spans */
    CHECK_EQ(tt_tcmctl(&daemon_, "config set profile_sample 0", out, sizeof out), 0);
    atomic_store(phase, 0);
    pid_t pid = tt_fork(child, NULL);
    wait_phase(1, pid);
    return pid;
}

/* The child: at phase 1, and on when the parent says (phase 2). */
static void handshake(void)
{
    atomic_store(phase, 1);
    wait_phase(2, 0);
}

/* The child goes on, ends cleanly, and everything is back and consistent. */
static void finish(pid_t pid)
{
    atomic_store(phase, 2);
    tt_wait_ok(pid, 60000);
    tt_check_heap(&daemon_);
    tt_check_all_back(&daemon_);
    tt_daemon_stop(&daemon_);
}

static int frees_go_back(void *arg)
{
    (void)arg;
    CHECK_GE(make_sparse(), SPANS * 3 / 4 * SPAN_OBJS / KEEP_EVERY);
    for (int i = 0; i < N; i += KEEP_EVERY) {
        bool drains = page_class(objs[i]) == TCM_PAGE_CLASS_DRAIN + CLS;
        tcm_free(objs[i]);
        void *again = tcm_malloc(SIZE);
        if (drains)
            CHECK(again != objs[i]); /* gathered for tcmd, not cached */
        tcm_free(again);
    }
    handshake();
    tcm_shutdown();
    return 0;
}

static void test_frees_go_back(void)
{
    pid_t pid = start(frees_go_back);
    /* everything is freed: what keeps a span is what the child's bin holds
     * (at most 4096 objects in a 256K budget, spread over the spans) or has
     * gathered (under 64); without draining, its bin would hold the 2048
     * kept objects, one in 16 of every span, and all 32 would stay */
    unsigned spans = class_spans();
    printf("spans of class %u after the kept objects were freed: %u (of %u)\n", CLS, spans, SPANS);
    CHECK_LE(spans, SPANS / 4);
    finish(pid);
}

static int dies_holding(void *arg)
{
    (void)arg;
    make_sparse();
    int gathered = 0;
    for (int i = 0; i < N && gathered < GATHERED; i += KEEP_EVERY)
        if (page_class(objs[i]) == TCM_PAGE_CLASS_DRAIN + CLS) {
            tcm_free(objs[i]);
            objs[i] = NULL;
            gathered++;
        }
    CHECK_EQ(gathered, GATHERED);
    atomic_store(phase, 1);
    for (;;)
        pause();
}

static void test_dead_process_gathered(void)
{
    pid_t pid = start(dies_holding);
    CHECK_EQ(kill(pid, SIGKILL), 0);
    int st = tt_wait(pid, 10000);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    tt_wait_stat(&daemon_, "clients_died", 1, 10000);
    /* its bins and what it gathered for tcmd came back; what it still had
     * in use is orphaned, to the byte */
    uint64_t orphaned = tt_stat(&daemon_, "bytes_orphaned");
    printf("orphaned %llu bytes, in use at the kill %u\n", (unsigned long long)orphaned, (KEPT - GATHERED) * SIZE);
    CHECK_EQ(orphaned, (uint64_t)(KEPT - GATHERED) * SIZE);
    tt_check_heap(&daemon_);
    tt_daemon_stop(&daemon_);
}

static int rides_restart(void *arg)
{
    (void)arg;
    CHECK_GT(make_sparse(), 0);
    handshake();
    for (int i = 0; i < N; i += KEEP_EVERY)
        CHECK_EQ(page_class(objs[i]), CLS); /* every page back to its class */
    for (int i = 0; i < N; i += KEEP_EVERY)
        tcm_free(objs[i]);
    tcm_shutdown();
    return 0;
}

static void test_restart_undrains(void)
{
    pid_t pid = start(rides_restart);
    tt_daemon_kill(&daemon_);
    tt_daemon_restart(&daemon_, NULL, NULL);
    tt_check_heap(&daemon_);
    finish(pid);
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    phase = mmap(NULL, sizeof *phase, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(phase != MAP_FAILED);
    test_frees_go_back();
    printf("ok   frees of a draining span go back to tcmd, and the span empties\n");
    test_dead_process_gathered();
    printf("ok   what a dead process gathered for tcmd comes back\n");
    test_restart_undrains();
    printf("ok   a restart sets draining pages back to their class\n");
    return 0;
}
