/* libtcm checks what it is given before it uses it, on its slow paths: a
 * page-map byte that is no size class (tcmd writes none) stops
 * tcm_usable_size and tcm_free before they index the class table, and an
 * offset tcmd hands out (a REFILL's objects, an ALLOC_PAGES run) that is
 * not an object of the class asked for, or not a page run, stops the
 * process before the application gets it; each with a message naming the
 * pointer or offset and the bad value, and abort().
 *
 * A real tcmd does neither, so the test plays the broken tcmd: the page map
 * is damaged through a read-write mapping of the metadata segment (the
 * test runs as tcmd's user; clients map it read-only), and answers are
 * forged into the client's own slot while tcmd is stopped (SIGSTOP), as a
 * tcmd with a bug would write them. Each case runs in a child of its own
 * (tt_run_cases: one that fails or hangs does not stop the others), against
 * a tcmd of its own that is killed after it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "prim.h"
#include "tcm.h"
#include "tcm_layout.h"
#include "testutil.h"

static tcm_test_daemon_t daemon_;
static char errfile[128];

/* a read-write view of a segment of the test's tcmd ("meta", "ch.*") */
static void *map_segment(const char *suffix, size_t *len)
{
    char pattern[160];
    glob_t g;
    snprintf(pattern, sizeof pattern, "/dev/shm/tcm.%s.%s", daemon_.name, suffix);
    CHECK_EQ(glob(pattern, 0, NULL, &g), 0);
    CHECK_EQ(g.gl_pathc, 1);
    int fd = open(g.gl_pathv[0], O_RDWR);
    CHECK_GE(fd, 0);
    globfree(&g);
    struct stat st;
    CHECK_EQ(fstat(fd, &st), 0);
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    close(fd);
    *len = (size_t)st.st_size;
    return p;
}

static uint8_t *page_class_of(const void *p)
{
    size_t len;
    uint8_t *meta = map_segment("meta", &len);
    const tcm_meta_hdr_t *m = (const tcm_meta_hdr_t *)meta;
    uint64_t off = (uint64_t)((uintptr_t)p - m->base);
    CHECK_LT(off, m->heap_size);
    return meta + m->off_page_class + (off >> TCM_PAGE_SHIFT);
}

static uint64_t heap_off(const void *p)
{
    return tcm_to_offset(p);
}

/* ---- the page map damaged ---- */

static int usable_size_child(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(daemon_.socket), 0);
    void *p = tcm_malloc(64);
    CHECK(p != NULL);
    *page_class_of(p) = 240; /* no class, draining or not, is 240 */
    printf("usable size %zu\n", tcm_usable_size(p));
    return 0; /* not reached with the check */
}

static int free_child(void *arg)
{
    (void)arg;
    CHECK_EQ(tcm_init(daemon_.socket), 0);
    void *p = tcm_malloc(64);
    CHECK(p != NULL);
    *page_class_of(p) = 97; /* one past the last class */
    tcm_free(p);
    return 0;
}

/* ---- answers forged while tcmd is stopped ---- */

typedef struct forgery {
    uint32_t op;     /* answer the first request of this kind posted */
    uint64_t off;    /* with this offset */
} forgery_t;

static void *forger(void *arg)
{
    const forgery_t *f = arg;
    size_t len;
    uint8_t *chan = map_segment("ch.*", &len);
    const tcm_chan_hdr_t *h = (const tcm_chan_hdr_t *)chan;
    tcm_slot_t *slots = (tcm_slot_t *)(chan + h->off_slots);
    for (;;) { /* until a request is posted: tcmd is stopped, nobody else answers */
        for (uint32_t i = 0; i < h->nslots; i++) {
            tcm_slot_t *s = &slots[i];
            if (atomic_load_explicit(&s->state, memory_order_acquire) != TCM_SLOT_POSTED || s->op != f->op)
                continue;
            s->status = TCM_ST_OK;
            s->result = f->off;
            s->nresult = 1;
            s->offs[0] = f->off;
            atomic_store_explicit(&s->state, TCM_SLOT_DONE, memory_order_release);
            tcm__wake(&s->state, 1);
            return NULL;
        }
        usleep(1000);
    }
}

/* malloc(size) with tcmd stopped and the forger answering with the offset
 * of an object of another class */
static int forged_child(uint32_t op, size_t size)
{
    CHECK_EQ(tcm_init(daemon_.socket), 0);
    void *other = tcm_malloc(1000); /* attaches, registers this thread */
    CHECK(other != NULL);
    static forgery_t f;
    uint64_t off = heap_off(other);
    /* a run: the page of that object, on a page boundary, so that the page
     * map is what tells it from a run */
    f = (forgery_t){op, op == TCM_OP_ALLOC_PAGES ? off & ~(uint64_t)(TCM_PAGE_SIZE - 1) : off};
    CHECK(tt_stop(daemon_.pid, 10000));
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, forger, &f), 0);
    void *p = tcm_malloc(size);
    printf("malloc(%zu) = %p (the object of class 1000 was %p)\n", size, p, other);
    return 0; /* not reached with the check */
}

static int refill_child(void *arg)
{
    (void)arg;
    return forged_child(TCM_OP_REFILL, 64);
}

static int pages_child(void *arg)
{
    (void)arg;
    return forged_child(TCM_OP_ALLOC_PAGES, 1 << 20);
}

static int (*child_fn)(void *);

/* the child's stderr (fd 2: the stdio stream stays unbuffered) into errfile */
static int with_stderr_to_file(void *arg)
{
    int fd = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK_GE(fd, 0);
    CHECK_EQ(dup2(fd, 2), 2);
    close(fd);
    return child_fn(arg);
}

/* One case: fn, run in a child against a tcmd of its own, must abort, and
 * its stderr must say want and want2. */
typedef struct fatal_case {
    const char *name;
    int (*fn)(void *);
    const char *want, *want2;
} fatal_case_t;

static void expect_fatal(const void *arg)
{
    const fatal_case_t *fc = arg;
    const char *name = fc->name, *want = fc->want, *want2 = fc->want2;
    int (*fn)(void *) = fc->fn;
    tt_daemon_start(&daemon_, NULL);
    snprintf(errfile, sizeof errfile, "/tmp/tcmtest-given-%d.err", (int)getpid());
    child_fn = fn;
    pid_t pid = tt_fork(with_stderr_to_file, NULL);
    int st = tt_wait(pid, 60000);
    char out[4096] = "";
    FILE *f = fopen(errfile, "r");
    if (f) {
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = 0;
        fclose(f);
    }
    unlink(errfile);
    printf("%s: %s, stderr: %s", name,
           WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : WIFEXITED(st) ? "exited" : "?", out);
    kill(daemon_.pid, SIGCONT);
    tt_daemon_kill(&daemon_);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -f /dev/shm/tcm.%s.*", daemon_.name);
    CHECK_EQ(system(cmd), 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    for (const char *w = want; w; w = w == want ? want2 : NULL) {
        if (!strstr(out, w))
            fprintf(stderr, "%s: stderr does not say '%s'\n", name, w);
        CHECK(strstr(out, w) != NULL);
    }
}

static const fatal_case_t fatal_cases[] = {
    {"tcm_usable_size, class byte 240", usable_size_child, "tcm_usable_size(): the page map gives 0x",
     "the class byte 240, which is neither a size class (1-96, or 129-224 while its span drains) nor a page run (255)"},
    {"tcm_free, class byte 97", free_child, "tcm_free(): the page map gives 0x", "the class byte 97, which is neither"},
    {"REFILL answered with an object of another class", refill_child, "tcmd handed out offset 0x",
     "for class 4: not an object of that class (its page has class "},
    {"ALLOC_PAGES answered with the page of a small object", pages_child, "tcmd handed out offset 0x",
     "for a run of 128 pages: not a page run (its page has class "},
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    enum { NCASES = sizeof fatal_cases / sizeof fatal_cases[0] };
    tt_case_t cases[NCASES];
    for (int i = 0; i < NCASES; i++)
        cases[i] = (tt_case_t){.name = fatal_cases[i].name, .fn_arg = expect_fatal, .arg = &fatal_cases[i]};
    /* argv: the names of the cases to run (all without) */
    return tt_run_named_cases("given", cases, NCASES, 120000, argv + 1, argc - 1) != 0;
}
