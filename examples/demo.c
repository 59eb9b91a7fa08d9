/*
 * tcm-demo — several processes sharing ONE heap.
 *
 *   parent    attaches to tcmd, allocates a table in the shared heap and
 *             publishes it under the root name "demo.table";
 *   workers   N forked children; each attaches as its own client, allocates
 *             K objects of various sizes, stamps them with its pid and puts
 *             their pointers (and offsets) in the table;
 *   consumer  a separate program (this binary re-executed with --consume):
 *             finds the table by its root name, checks every object, reports
 *             who made what and frees everything (a cross-process free);
 *   parent    checks the consumer's work, removes the root, frees the table
 *             and shows `tcmctl stats` and `tcmctl clients`.
 *
 * Needs a running tcmd on $TCM_SOCKET (or the default socket). Exit status:
 * 0 when every check passed, 1 otherwise, 2 for a usage error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tcm.h>

#define ROOT_NAME "demo.table"
#define TABLE_MAGIC 0x656c626174636d74ull /* "tcmtable" */
#define OBJ_MAGIC 0x7463646f6d656474ull   /* "tdemodct" */
#define MAX_WORKERS 16
#define MAX_OBJECTS 4096

/* One published object: its pointer (valid in every attached process, the
 * heap is at the same address everywhere) and the same position as an
 * offset, for programs that prefer to store those. */
typedef struct {
    void *ptr;
    uint64_t off;
    uint32_t size;
    int32_t pid;
} demo_slot_t;

/* The shared table, itself allocated with tcm_calloc. Worker w owns slots
 * [w * per_worker, (w + 1) * per_worker); the counters are shared by all. */
typedef struct {
    uint64_t magic;
    uint32_t nworkers;
    uint32_t per_worker;
    int32_t worker_pid[MAX_WORKERS];
    _Atomic uint64_t published; /* objects put in the table by the workers */
    _Atomic uint64_t published_bytes;
    _Atomic uint64_t verified; /* objects the consumer found intact */
    _Atomic uint64_t freed;    /* objects the consumer freed */
    _Atomic uint64_t freed_bytes;
    _Atomic int32_t consumer_pid;
    demo_slot_t slot[];
} demo_table_t;

/* The head of every object; the rest is a pattern derived from pid and seq. */
typedef struct {
    uint64_t magic;
    int32_t pid;
    uint32_t worker;
    uint32_t seq;
    uint32_t size;
    char label[32]; /* "pid 1234 worker 1 #17", readable in a hex dump */
} demo_obj_t;

static const uint32_t sizes[] = {64, 100, 256, 640, 1000, 3000, 4096, 10000, 40000, 65536, 300000, 1u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static const char *role = "parent";

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    printf("[%-9s %6d] %s\n", role, (int)getpid(), line);
    fflush(stdout);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "[%-9s %6d] FAILED: %s\n", role, (int)getpid(), line);
    fflush(stderr);
}

static size_t table_bytes(uint32_t nworkers, uint32_t per_worker)
{
    return sizeof(demo_table_t) + (size_t)nworkers * per_worker * sizeof(demo_slot_t);
}

static uint8_t pattern_byte(int32_t pid, uint32_t seq, size_t i)
{
    return (uint8_t)((uint32_t)pid * 31u + seq * 7u + (uint32_t)i * 13u + (uint32_t)(i >> 8));
}

static uint32_t object_size(uint32_t worker, uint32_t seq)
{
    return sizes[(worker * 5u + seq) % NSIZES] + (seq % 7u) * 8u;
}

static const char *human(uint64_t b, char *buf, size_t len)
{
    if (b >= 1ull << 20)
        snprintf(buf, len, "%.1f MiB", (double)b / (1 << 20));
    else if (b >= 1ull << 10)
        snprintf(buf, len, "%.1f KiB", (double)b / 1024);
    else
        snprintf(buf, len, "%llu B", (unsigned long long)b);
    return buf;
}

/* Status of a waited-for child, as text; true if it exited with 0. */
static bool child_ok(int status, char *buf, size_t len)
{
    if (WIFEXITED(status)) {
        snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
        return WEXITSTATUS(status) == 0;
    }
    if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "status 0x%x", status);
    return false;
}

static int wait_child(pid_t pid, const char *what)
{
    int status;
    char desc[96];
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            fail("waitpid(%s, pid %d): %s", what, (int)pid, strerror(errno));
            return -1;
        }
    }
    if (!child_ok(status, desc, sizeof desc)) {
        fail("%s (pid %d): %s", what, (int)pid, desc);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* worker: a forked child                                              */

static int run_worker(demo_table_t *t, uint32_t w, int ready_fd, int go_fd)
{
    static char r[16];
    snprintf(r, sizeof r, "worker%u", w + 1);
    role = r;
    /* After fork() the caches inherited from the parent are the parent's;
     * attaching explicitly makes this process a client of its own. */
    int rc = tcm_init(NULL);
    if (rc) {
        fail("tcm_init: %s", strerror(-rc));
        return 1;
    }
    demo_table_t *seen = tcm_root_get(ROOT_NAME);
    if (seen != t) {
        fail("tcm_root_get(\"%s\") gave %p, the parent published %p", ROOT_NAME, (void *)seen, (void *)t);
        return 1;
    }
    const int32_t pid = (int32_t)getpid();
    uint64_t bytes = 0;
    uint32_t smin = UINT32_MAX, smax = 0;
    for (uint32_t i = 0; i < t->per_worker; i++) {
        uint32_t size = object_size(w, i);
        /* mostly tcm_malloc; every 4th one zeroed by tcm_calloc */
        uint8_t *p = (i % 4 == 3) ? tcm_calloc(1, size) : tcm_malloc(size);
        if (!p) {
            fail("allocating object %u (%u bytes): %s", i, size, strerror(errno));
            return 1;
        }
        if (((uintptr_t)p & 15) || tcm_usable_size(p) < size) {
            fail("object %u at %p: alignment or usable size (%zu < %u) wrong", i, (void *)p,
                 tcm_usable_size(p), size);
            return 1;
        }
        demo_obj_t *o = (demo_obj_t *)p;
        o->magic = OBJ_MAGIC;
        o->pid = pid;
        o->worker = w;
        o->seq = i;
        o->size = size;
        memset(o->label, 0, sizeof o->label);
        snprintf(o->label, sizeof o->label, "pid %d worker %u #%u", (int)pid, w + 1, i);
        for (size_t k = sizeof *o; k < size; k++)
            p[k] = pattern_byte(pid, i, k);

        demo_slot_t *s = &t->slot[(size_t)w * t->per_worker + i];
        s->ptr = p;
        s->off = tcm_to_offset(p);
        s->size = size;
        s->pid = pid;
        atomic_fetch_add_explicit(&t->published, 1, memory_order_release);
        atomic_fetch_add_explicit(&t->published_bytes, size, memory_order_relaxed);
        bytes += size;
        smin = size < smin ? size : smin;
        smax = size > smax ? size : smax;
    }
    char hb[32];
    say("attached as a client of its own; allocated %u objects (%u..%u bytes, %s in all), "
        "stamped them with pid %d and published them in slots %u..%u of " ROOT_NAME,
        t->per_worker, smin, smax, human(bytes, hb, sizeof hb), (int)pid, w * t->per_worker,
        (w + 1) * t->per_worker - 1);

    /* Stay attached until the parent has looked at `tcmctl clients`. */
    (void)!write(ready_fd, "r", 1);
    char c;
    while (read(go_fd, &c, 1) < 0 && errno == EINTR)
        ;
    /* Flush this process's caches and detach; the published objects stay
     * allocated: they now belong to whoever frees them. */
    tcm_shutdown();
    return 0;
}

/* ------------------------------------------------------------------ */
/* consumer: a separate program that only knows the root name          */

static int run_consumer(void)
{
    role = "consumer";
    int rc = tcm_init(NULL);
    if (rc) {
        fail("tcm_init: %s", strerror(-rc));
        return 1;
    }
    demo_table_t *t = tcm_root_get(ROOT_NAME);
    if (!t) {
        fail("no root named \"%s\": is the demo's parent attached to the same tcmd?", ROOT_NAME);
        return 1;
    }
    if (t->magic != TABLE_MAGIC || t->nworkers == 0 || t->nworkers > MAX_WORKERS || t->per_worker == 0 ||
        t->per_worker > MAX_OBJECTS || tcm_usable_size(t) < table_bytes(t->nworkers, t->per_worker)) {
        fail("the table at %p is not a demo table", (void *)t);
        return 1;
    }
    atomic_store(&t->consumer_pid, (int32_t)getpid());
    uint64_t published = atomic_load_explicit(&t->published, memory_order_acquire);
    say("exec'd as a separate program; found root \"%s\" -> %p (offset 0x%llx): %u workers x %u objects, "
        "%llu published",
        ROOT_NAME, (void *)t, (unsigned long long)tcm_to_offset(t), t->nworkers, t->per_worker,
        (unsigned long long)published);

    uint64_t count[MAX_WORKERS] = {0}, bytes[MAX_WORKERS] = {0}, total = 0, total_bytes = 0, bad = 0;
    for (uint32_t w = 0; w < t->nworkers; w++) {
        for (uint32_t i = 0; i < t->per_worker; i++) {
            demo_slot_t *s = &t->slot[(size_t)w * t->per_worker + i];
            uint8_t *p = s->ptr;
            if (!p) {
                fail("slot %u of worker %u is empty", i, w + 1);
                bad++;
                continue;
            }
            /* The pointer is usable as is; the offset names the same place. */
            if (tcm_to_offset(p) == UINT64_MAX || tcm_from_offset(s->off) != p) {
                fail("slot %u of worker %u: %p / offset 0x%llx is not a heap object", i, w + 1, (void *)p,
                     (unsigned long long)s->off);
                bad++;
                continue; /* freeing it would be fatal */
            }
            const demo_obj_t *o = (const demo_obj_t *)p;
            bool ok = o->magic == OBJ_MAGIC && o->pid == s->pid && o->pid == t->worker_pid[w] && o->worker == w &&
                      o->seq == i && o->size == s->size && tcm_usable_size(p) >= s->size;
            for (size_t k = sizeof *o; ok && k < s->size; k++)
                ok = p[k] == pattern_byte(o->pid, i, k);
            if (ok) {
                count[w]++;
                bytes[w] += s->size;
                total++;
                total_bytes += s->size;
                atomic_fetch_add(&t->verified, 1);
            } else {
                fail("object %u of worker %u at %p (\"%.31s\") does not hold its pattern", i, w + 1, (void *)p,
                     o->label);
                bad++;
            }
            /* Cross-process free: allocated by the worker, freed here. */
            uint32_t size = s->size;
            s->ptr = NULL;
            s->off = 0;
            tcm_free(p);
            atomic_fetch_add(&t->freed, 1);
            atomic_fetch_add(&t->freed_bytes, size);
        }
    }
    char hb[32];
    for (uint32_t w = 0; w < t->nworkers; w++)
        say("  %llu objects (%s) made by pid %d (worker%u): pattern intact", (unsigned long long)count[w],
            human(bytes[w], hb, sizeof hb), (int)t->worker_pid[w], w + 1);
    say("verified %llu objects, %s in all, %llu bad; freed every one of them (memory another process "
        "allocated)",
        (unsigned long long)total, human(total_bytes, hb, sizeof hb), (unsigned long long)bad);
    tcm_shutdown();
    return bad || total != published ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* parent                                                              */

static int run_tcmctl(const char *tcmctl, const char *cmd)
{
    const char *sock = getenv("TCM_SOCKET");
    const char *argv[6];
    int n = 0;
    argv[n++] = tcmctl;
    if (sock && *sock) {
        argv[n++] = "--socket";
        argv[n++] = sock;
    }
    argv[n++] = cmd;
    argv[n] = NULL;
    printf("\n$ %s%s%s %s\n", tcmctl, sock && *sock ? " --socket " : "", sock && *sock ? sock : "", cmd);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fail("fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        execvp(tcmctl, (char *const *)argv);
        fprintf(stderr, "tcm-demo: cannot run %s: %s\n", tcmctl, strerror(errno));
        _exit(127);
    }
    int rc = wait_child(pid, "tcmctl");
    printf("\n");
    fflush(stdout);
    return rc;
}

/* Default tcmctl: next to the demo's build directory (BUILD/examples/tcm-demo
 * -> BUILD/tcmctl), else the one on $PATH. buf holds PATH_MAX bytes. */
static void default_tcmctl(char *buf)
{
    static const char rel[] = "/../tcmctl";
    char exe[PATH_MAX], cand[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        const char *dir = dirname(exe);
        size_t dl = strlen(dir);
        if (dl + sizeof rel <= sizeof cand) {
            memcpy(cand, dir, dl);
            memcpy(cand + dl, rel, sizeof rel);
            if (access(cand, X_OK) == 0 && realpath(cand, buf))
                return;
        }
    }
    strcpy(buf, "tcmctl");
}

/* Wait until every worker has published (one byte each) or 60 s passed. */
static uint32_t wait_ready(int fd, uint32_t n)
{
    uint32_t got = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (got < n) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left_ms = 60000 - (long)((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
        if (left_ms <= 0)
            break;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)left_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        char buf[MAX_WORKERS];
        ssize_t k = read(fd, buf, sizeof buf);
        if (k <= 0)
            break; /* every worker is gone */
        got += (uint32_t)k;
    }
    return got;
}

static int run_parent(const char *self, const char *tcmctl, uint32_t nworkers, uint32_t per_worker)
{
    char sock[256], hb[32];
    const char *env = getenv("TCM_SOCKET");
    snprintf(sock, sizeof sock, "%s", env && *env ? env : "the default socket");
    int rc = tcm_init(NULL);
    if (rc) {
        fail("cannot attach to tcmd on %s: %s. Start it first, e.g. build/tcmd, or run ./scripts/demo.sh",
             sock, strerror(-rc));
        return 1;
    }
    say("attached to tcmd on %s", sock);

    size_t tbytes = table_bytes(nworkers, per_worker);
    demo_table_t *t = tcm_calloc(1, tbytes);
    if (!t) {
        fail("tcm_calloc(%zu): %s", tbytes, strerror(errno));
        return 1;
    }
    t->magic = TABLE_MAGIC;
    t->nworkers = nworkers;
    t->per_worker = per_worker;
    if (tcm_root_get(ROOT_NAME))
        say("note: replacing a \"%s\" root left by an earlier run", ROOT_NAME);
    rc = tcm_root_set(ROOT_NAME, t);
    if (rc || tcm_root_get(ROOT_NAME) != t) {
        fail("tcm_root_set(\"%s\"): %s", ROOT_NAME, rc ? strerror(-rc) : "tcm_root_get disagrees");
        tcm_free(t);
        return 1;
    }
    say("allocated a %zu-byte table at %p (heap offset 0x%llx) with %u slots and published it as root \"%s\"",
        tbytes, (void *)t, (unsigned long long)tcm_to_offset(t), nworkers * per_worker, ROOT_NAME);

    int ready[2], go[2];
    if (pipe(ready) != 0 || pipe(go) != 0) {
        fail("pipe: %s", strerror(errno));
        return 1;
    }
    pid_t pids[MAX_WORKERS];
    uint32_t started = 0;
    bool ok = true;
    for (uint32_t w = 0; w < nworkers; w++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            fail("fork: %s", strerror(errno));
            ok = false;
            break;
        }
        if (pid == 0) {
            close(ready[0]);
            close(go[1]);
            int code = run_worker(t, w, ready[1], go[0]);
            fflush(stdout);
            _exit(code);
        }
        t->worker_pid[w] = (int32_t)pid;
        pids[started++] = pid;
        say("forked worker%u as pid %d", w + 1, (int)pid);
    }
    close(ready[1]);
    close(go[0]);

    uint32_t got = ok ? wait_ready(ready[0], started) : 0;
    if (ok && got == started) {
        say("all %u workers have published and are still attached:", started);
        if (run_tcmctl(tcmctl, "clients") != 0)
            ok = false;
    }
    close(go[1]); /* let the workers detach and exit */
    close(ready[0]);
    for (uint32_t i = 0; i < started; i++) {
        char what[32];
        snprintf(what, sizeof what, "worker%u", i + 1);
        if (wait_child(pids[i], what) != 0)
            ok = false;
    }
    uint64_t published = atomic_load_explicit(&t->published, memory_order_acquire);
    uint64_t pbytes = atomic_load(&t->published_bytes);
    say("workers exited; the table holds %llu objects (%s) made by pids %d..%d", (unsigned long long)published,
        human(pbytes, hb, sizeof hb), (int)t->worker_pid[0], (int)t->worker_pid[started ? started - 1 : 0]);
    if (!ok || published != (uint64_t)nworkers * per_worker) {
        fail("expected %u objects in the table, found %llu", nworkers * per_worker, (unsigned long long)published);
        ok = false;
    }

    if (ok) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            fail("fork: %s", strerror(errno));
            ok = false;
        } else if (pid == 0) {
            /* A fresh program image: nothing inherited but $TCM_SOCKET. */
            execl(self, self, "--consume", (char *)NULL);
            fprintf(stderr, "tcm-demo: cannot exec %s: %s\n", self, strerror(errno));
            _exit(127);
        } else {
            say("started the consumer (this program re-executed with --consume) as pid %d", (int)pid);
            if (wait_child(pid, "consumer") != 0)
                ok = false;
        }
    }

    uint64_t verified = atomic_load(&t->verified), freed = atomic_load(&t->freed);
    uint64_t fbytes = atomic_load(&t->freed_bytes);
    uint64_t left = 0;
    for (size_t i = 0; i < (size_t)nworkers * per_worker; i++)
        left += t->slot[i].ptr != NULL;
    say("the consumer (pid %d) verified %llu and freed %llu objects (%s); %llu slots still hold an object",
        (int)atomic_load(&t->consumer_pid), (unsigned long long)verified, (unsigned long long)freed,
        human(fbytes, hb, sizeof hb), (unsigned long long)left);
    if (verified != published || freed != published || fbytes != pbytes || left) {
        fail("the consumer did not verify and free every published object");
        ok = false;
    }

    /* Objects still in the table (after a failure) are freed here. */
    for (size_t i = 0; i < (size_t)nworkers * per_worker; i++)
        if (t->slot[i].ptr && tcm_to_offset(t->slot[i].ptr) != UINT64_MAX)
            tcm_free(t->slot[i].ptr);
    rc = tcm_root_set(ROOT_NAME, NULL);
    if (rc || tcm_root_get(ROOT_NAME) != NULL) {
        fail("removing root \"%s\": %s", ROOT_NAME, rc ? strerror(-rc) : "still there");
        ok = false;
    }
    tcm_free(t);
    say("removed root \"%s\" and freed the table", ROOT_NAME);

    say("what tcmd says now:");
    if (run_tcmctl(tcmctl, "stats") != 0)
        ok = false;
    if (run_tcmctl(tcmctl, "clients") != 0)
        ok = false;
    tcm_shutdown();
    if (ok)
        say("demo OK: %u worker processes allocated, 1 other process verified and freed %llu objects (%s) in one "
            "shared heap",
            started, (unsigned long long)published, human(pbytes, hb, sizeof hb));
    else
        say("demo FAILED (see the messages above)");
    return ok ? 0 : 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tcm-demo [--workers N] [--objects K] [--tcmctl PATH]\n"
            "  Several processes share one tcm heap: N forked workers (default 3) each\n"
            "  allocate K objects (default 64) and publish them in a table found by the\n"
            "  root name \"" ROOT_NAME "\"; a separate consumer process verifies and frees\n"
            "  them. Needs a running tcmd on $TCM_SOCKET or the default socket.\n"
            "  --tcmctl PATH  tcmctl to show stats with (default: DIR/../tcmctl, DIR being\n"
            "                 this program's directory, else tcmctl on $PATH)\n"
            "  --consume      (internal) run as the consumer\n");
}

int main(int argc, char **argv)
{
    char tcmctl[PATH_MAX], self[PATH_MAX];
    bool consume = false;
    unsigned long nworkers = 3, per_worker = 64;
    char *end;
    enum { O_TCMCTL = 256, O_CONSUME, O_WORKERS, O_OBJECTS };
    static const struct option opts[] = {
        {"tcmctl", required_argument, 0, O_TCMCTL},   {"consume", no_argument, 0, O_CONSUME},
        {"workers", required_argument, 0, O_WORKERS}, {"objects", required_argument, 0, O_OBJECTS},
        {"help", no_argument, 0, 'h'},                {0, 0, 0, 0},
    };
    setvbuf(stdout, NULL, _IOLBF, 0);
    default_tcmctl(tcmctl);
    int opt;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (opt) {
        case O_TCMCTL: snprintf(tcmctl, sizeof tcmctl, "%s", optarg); break;
        case O_CONSUME: consume = true; break;
        case O_WORKERS:
            nworkers = strtoul(optarg, &end, 10);
            if (*end || nworkers < 1 || nworkers > MAX_WORKERS) {
                fprintf(stderr, "tcm-demo: --workers must be 1..%d\n", MAX_WORKERS);
                return 2;
            }
            break;
        case O_OBJECTS:
            per_worker = strtoul(optarg, &end, 10);
            if (*end || per_worker < 1 || per_worker > MAX_OBJECTS) {
                fprintf(stderr, "tcm-demo: --objects must be 1..%d\n", MAX_OBJECTS);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tcm-demo: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (consume)
        return run_consumer();

    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "tcm-demo: cannot find my own executable: %s\n", strerror(errno));
        return 1;
    }
    self[n] = 0;
    return run_parent(self, tcmctl, (uint32_t)nworkers, (uint32_t)per_worker);
}
