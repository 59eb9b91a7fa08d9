/* mixes.c — tcm-bench-mixes: realistic allocation mixes, with threads or
 * with processes sharing the tcm heap.
 *
 * Sizes are heavy-tailed: 16/u bytes for u uniform in (0,1], capped at
 * 256 KiB (P(size > x) = 16/x: median 32 B, mean about 170 B, 0.4% above
 * 4 KiB, 0.02% above 64 KiB).
 *
 *   larson   W workers, each with an array of M slots (all arrays in shared
 *            memory). Each op frees a random slot's object and puts a new
 *            one of random size there, so lifetimes are random (geometric).
 *            Work is in rounds of N ops; after each round the arrays move
 *            on to the next worker (as larson hands them to a new thread),
 *            so most objects are freed by another thread or process than
 *            the one that allocated them.
 *   xmalloc  W/2 producer/consumer pairs joined by SPSC rings in shared
 *            memory: producers allocate random sizes, consumers keep the
 *            last H objects in a window and free a random one of them for
 *            each object they receive (random lifetime, freed elsewhere).
 *
 * --mode threads: workers are threads of this process (any allocator).
 * --mode procs: workers are forked processes on one tcmd (tcm only).
 * Timing: workers set up (larson: fill the arrays), wait on a barrier, the
 * parent takes the time around go and done. The op count is pairs in all.
 *
 * --mem (larson): the daemon's bytes_committed (the heap segment's
 * allocated blocks; for another malloc, the process's resident bytes above
 * its start, less the slot arrays) against the bytes live: at the peak (all slots full),
 * in steady state (after half the slots were freed and the churn ran), after
 * everything is freed and the workers are gone, and after `tcmctl release`.
 *
 * CSV: mix,allocator,mode,workers,ops,median_s,min_s,max_s,mops_per_s
 * --mem CSV: mem,mode,workers,live_peak,committed_peak,live_steady,
 *            committed_steady,committed_freed,committed_released,released_pct_of_peak,
 *            bytes_cached (by the harness process, the one client left, after free-all) */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "tcm.h"

#define MAX_WORKERS 64
#define RING_CAP 1024u
#define MAX_SIZE (256u * 1024u)

typedef struct {
    _Alignas(64) _Atomic uint64_t head;
    _Alignas(64) _Atomic uint64_t tail;
    void *slot[RING_CAP];
} ring_t;

typedef struct {
    _Alignas(64) uint64_t live; /* bytes requested and not freed, of this array */
} array_hdr_t;

typedef struct {
    pthread_barrier_t ready, go, done, round, freed, sampled;
    _Atomic int failed;
    _Atomic uint64_t checksum;
    array_hdr_t hdr[MAX_WORKERS];
    ring_t ring[MAX_WORKERS / 2];
    /* then: W arrays of M slots (pointer + size) */
} shared_t;

typedef struct {
    void *p;
    uint64_t size;
} slot_t;

typedef struct {
    int larson, procs, mem;
    int workers;
    size_t slots, window;
    uint64_t ops, rounds; /* larson: ops per worker per round; xmalloc: per producer */
    const bench_alloc_t *a;
    shared_t *s;
    slot_t *arrays;
} cfg_t;

typedef struct {
    const cfg_t *c;
    int idx;
} worker_arg_t;

static inline uint64_t rnd(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1Dull;
}

static inline size_t rnd_size(uint64_t *x)
{
    /* 16/u with u in (0,1]: 53 random bits */
    double u = (double)((rnd(x) >> 11) + 1) * (1.0 / 9007199254740992.0);
    double s = 16.0 / u;
    return s >= (double)MAX_SIZE ? MAX_SIZE : (size_t)s;
}

static void backoff(unsigned *spins)
{
    if (++*spins < 256)
        __builtin_ia32_pause();
    else
        sched_yield();
}

static int put(const cfg_t *c, slot_t *sl, array_hdr_t *h, uint64_t *x)
{
    size_t size = rnd_size(x);
    char *p = c->a->alloc(size);
    if (!p)
        return -1;
    if (c->mem) /* every byte: resident memory then counts what is live */
        memset(p, (char)size, size);
    else
        p[0] = (char)size;
    sl->p = p;
    sl->size = size;
    h->live += size;
    return 0;
}

static void drop(const cfg_t *c, slot_t *sl, array_hdr_t *h)
{
    if (!sl->p)
        return;
    c->a->release(sl->p);
    h->live -= sl->size;
    sl->p = NULL;
}

static void larson(const cfg_t *c, int idx)
{
    shared_t *s = c->s;
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(idx + 1);
    int failed = 0;
    slot_t *mine = c->arrays + (size_t)idx * c->slots;
    for (size_t j = 0; j < c->slots && !failed; j++)
        failed = put(c, &mine[j], &s->hdr[idx], &x) != 0;
    size_t used = c->slots;
    if (c->mem) {
        /* peak: the parent samples; then shrink to half for steady state */
        pthread_barrier_wait(&s->sampled);
        pthread_barrier_wait(&s->sampled);
        used = c->slots / 2;
        for (size_t j = used; j < c->slots; j++)
            drop(c, &mine[j], &s->hdr[idx]);
    }
    if (failed)
        atomic_store(&s->failed, 1);
    pthread_barrier_wait(&s->ready);
    pthread_barrier_wait(&s->go);
    uintptr_t sum = 0;
    for (uint64_t r = 0; r < c->rounds; r++) {
        int a = (int)((idx + (int)r) % c->workers);
        slot_t *arr = c->arrays + (size_t)a * c->slots;
        array_hdr_t *h = &s->hdr[a];
        for (uint64_t i = 0; i < c->ops && !failed; i++) {
            slot_t *sl = &arr[rnd(&x) % used];
            if (sl->p)
                sum += (unsigned char)((char *)sl->p)[0];
            drop(c, sl, h);
            failed = put(c, sl, h, &x) != 0;
        }
        if (failed)
            atomic_store(&s->failed, 1);
        pthread_barrier_wait(&s->round);
    }
    atomic_fetch_add(&s->checksum, sum);
    pthread_barrier_wait(&s->done);
    if (c->mem)
        pthread_barrier_wait(&s->sampled); /* steady state sampled */
    /* free all (untimed): the array this worker holds now */
    int a = (int)((idx + (int)c->rounds) % c->workers);
    slot_t *arr = c->arrays + (size_t)a * c->slots;
    for (size_t j = 0; j < c->slots; j++)
        drop(c, &arr[j], &s->hdr[a]);
}

static void xmalloc(const cfg_t *c, int idx)
{
    shared_t *s = c->s;
    ring_t *q = &s->ring[idx / 2];
    uint64_t x = 0xD1B54A32D192ED03ull * (uint64_t)(idx + 1);
    int producer = idx % 2 == 0;
    slot_t *win = producer ? NULL : calloc(c->window, sizeof *win);
    array_hdr_t local = {0};
    if (!producer && !win)
        atomic_store(&s->failed, 1);
    pthread_barrier_wait(&s->ready);
    pthread_barrier_wait(&s->go);
    uintptr_t sum = 0;
    if (producer) {
        uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
        uint64_t head = atomic_load_explicit(&q->head, memory_order_acquire);
        for (uint64_t i = 0; i < c->ops; i++) {
            size_t size = rnd_size(&x);
            char *p = c->a->alloc(size);
            if (p)
                p[0] = (char)size;
            else
                atomic_store(&s->failed, 1);
            for (unsigned spins = 0; tail - head == RING_CAP;) {
                head = atomic_load_explicit(&q->head, memory_order_acquire);
                if (tail - head == RING_CAP)
                    backoff(&spins);
            }
            q->slot[tail & (RING_CAP - 1)] = p;
            atomic_store_explicit(&q->tail, ++tail, memory_order_release);
        }
    } else if (win) {
        uint64_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
        uint64_t tail = atomic_load_explicit(&q->tail, memory_order_acquire);
        for (uint64_t i = 0; i < c->ops; i++) {
            for (unsigned spins = 0; head == tail;) {
                tail = atomic_load_explicit(&q->tail, memory_order_acquire);
                if (head == tail)
                    backoff(&spins);
            }
            char *p = q->slot[head & (RING_CAP - 1)];
            atomic_store_explicit(&q->head, ++head, memory_order_release);
            if (p)
                sum += (unsigned char)p[0];
            slot_t *sl = &win[rnd(&x) % c->window];
            drop(c, sl, &local);
            sl->p = p;
        }
    }
    atomic_fetch_add(&s->checksum, sum);
    pthread_barrier_wait(&s->done);
    if (win) {
        for (size_t j = 0; j < c->window; j++)
            drop(c, &win[j], &local);
        free(win);
    }
}

static void *worker_main(void *arg)
{
    const worker_arg_t *w = arg;
    if (w->c->larson)
        larson(w->c, w->idx);
    else
        xmalloc(w->c, w->idx);
    if (w->c->mem)
        pthread_barrier_wait(&w->c->s->freed);
    return NULL;
}

static unsigned timeout_s = 300;

static uint64_t live_bytes(const cfg_t *c)
{
    uint64_t live = 0;
    for (int i = 0; i < c->workers; i++)
        live += c->s->hdr[i].live;
    return live;
}

typedef struct {
    int64_t live_peak, peak, live_steady, steady, freed, cached, released;
    /* steady state, where the committed bytes are: in use (as tcmd counts it: class sizes),
       free in central lists (partly used spans), free in the page heap, in clients' caches */
    int64_t in_use, central_free, pageheap_free, client_caches;
} mem_t;

/* The process's resident bytes (for an in-process malloc: its heap, plus
 * whatever else the process touched). */
static int64_t rss_bytes(void)
{
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (int64_t)resident * sysconf(_SC_PAGESIZE);
}

/* Bytes the heap keeps in memory: tcm's segment blocks as tcmd measures
 * them; for another malloc, the process's resident bytes above what it had
 * before the workers started, less the slot arrays (touched by then). */
static int64_t heap_bytes(const cfg_t *c, const bench_daemon_t *d, int64_t rss_base)
{
    if (strcmp(c->a->name, "tcm") == 0)
        return bench_daemon_query(d, "stats", "bytes_committed");
    return rss_bytes() - rss_base - (int64_t)((size_t)c->workers * c->slots * sizeof(slot_t));
}

static double run_once(const cfg_t *c, const bench_daemon_t *d, mem_t *m)
{
    shared_t *s = c->s;
    int is_tcm = strcmp(c->a->name, "tcm") == 0;
    int64_t rss_base = rss_bytes();
    unsigned w = (unsigned)c->workers;
    pthread_barrierattr_t attr;
    pthread_barrierattr_init(&attr);
    pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&s->ready, &attr, w + 1);
    pthread_barrier_init(&s->go, &attr, w + 1);
    pthread_barrier_init(&s->done, &attr, w + 1);
    pthread_barrier_init(&s->sampled, &attr, w + 1);
    pthread_barrier_init(&s->freed, &attr, w + 1);
    pthread_barrier_init(&s->round, &attr, w);
    pthread_barrierattr_destroy(&attr);
    atomic_store(&s->failed, 0);
    for (int i = 0; i < c->workers; i++)
        s->hdr[i].live = 0;
    for (int i = 0; i < c->workers / 2; i++) {
        atomic_store(&s->ring[i].head, 0);
        atomic_store(&s->ring[i].tail, 0);
    }
    if (c->larson)
        memset(c->arrays, 0, (size_t)c->workers * c->slots * sizeof(slot_t));

    pid_t pid[MAX_WORKERS];
    pthread_t tid[MAX_WORKERS];
    worker_arg_t args[MAX_WORKERS];
    for (int i = 0; i < c->workers; i++) {
        args[i] = (worker_arg_t){.c = c, .idx = i};
        if (!c->procs) {
            if (pthread_create(&tid[i], NULL, worker_main, &args[i]) != 0) {
                perror("bench: pthread_create");
                exit(1);
            }
            continue;
        }
        if ((pid[i] = bench_fork()) == 0) {
            if (tcm_init(NULL) != 0)
                atomic_store(&s->failed, 1);
            worker_main(&args[i]);
            tcm_shutdown();
            _exit(0);
        }
    }
    alarm(timeout_s);
    if (c->mem) {
        pthread_barrier_wait(&s->sampled);
        m->live_peak = (int64_t)live_bytes(c);
        m->peak = heap_bytes(c, d, rss_base);
        if (is_tcm && getenv("TCM_BENCH_MEM_DEBUG"))
            fprintf(stderr, "peak: in use %lld central free %lld page heap free %lld client caches %lld\n",
                    (long long)bench_daemon_query(d, "stats", "bytes_in_use"),
                    (long long)bench_daemon_query(d, "stats", "bytes_central_free"),
                    (long long)bench_daemon_query(d, "stats", "bytes_pageheap_free"),
                    (long long)bench_daemon_query(d, "stats", "bytes_client_caches"));
        pthread_barrier_wait(&s->sampled);
    }
    pthread_barrier_wait(&s->ready);
    double t0 = bench_now();
    pthread_barrier_wait(&s->go);
    pthread_barrier_wait(&s->done);
    double t1 = bench_now();
    if (c->mem) {
        m->live_steady = (int64_t)live_bytes(c);
        m->steady = heap_bytes(c, d, rss_base);
        if (is_tcm) {
            m->in_use = bench_daemon_query(d, "stats", "bytes_in_use");
            m->central_free = bench_daemon_query(d, "stats", "bytes_central_free");
            m->pageheap_free = bench_daemon_query(d, "stats", "bytes_pageheap_free");
            m->client_caches = bench_daemon_query(d, "stats", "bytes_client_caches");
            if (getenv("TCM_BENCH_MEM_DEBUG")) {
                bench_daemon_print(d, "classes");
                /* committed less this: free pages the heap still backs */
                fprintf(stderr, "spans %lld\n", (long long)bench_daemon_query(d, "stats", "bytes_spans"));
                /* what the memory cost in round trips and page work */
                fprintf(stderr, "requests: refill %lld return %lld; bytes released %lld, decays %lld; %.3f s\n",
                        (long long)bench_daemon_query(d, "stats", "requests_refill"),
                        (long long)bench_daemon_query(d, "stats", "requests_return"),
                        (long long)bench_daemon_query(d, "stats", "bytes_released"),
                        (long long)bench_daemon_query(d, "stats", "decays"), t1 - t0);
            }
        }
        pthread_barrier_wait(&s->sampled);
        pthread_barrier_wait(&s->freed);
    }
    int failed = atomic_load(&s->failed);
    for (int i = 0; i < c->workers; i++) {
        if (!c->procs) {
            pthread_join(tid[i], NULL);
            continue;
        }
        int status;
        waitpid(pid[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "bench: worker %d ended with status 0x%x\n", i, status);
            failed = 1;
        }
    }
    alarm(0);
    if (c->mem) {
        /* every worker freed everything and is gone (threads flushed their
         * caches at exit, processes detached) */
        m->freed = heap_bytes(c, d, rss_base);
        /* what the harness process (the only client left) still caches */
        m->cached = is_tcm ? bench_daemon_query(d, "clients", "bytes_cached") : 0;
        m->released = is_tcm ? bench_daemon_query(d, "release", "committed_after") : m->freed;
    }
    pthread_barrier_destroy(&s->ready);
    pthread_barrier_destroy(&s->go);
    pthread_barrier_destroy(&s->done);
    pthread_barrier_destroy(&s->sampled);
    pthread_barrier_destroy(&s->freed);
    pthread_barrier_destroy(&s->round);
    return failed ? -1 : t1 - t0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tcm-bench-mixes [--mix larson|xmalloc] [--mode threads|procs] [--workers W]\n"
               "                       [--ops N] [--rounds R] [--slots M] [--window H] [--runs R]\n"
               "                       [--alloc tcm|SYSTEM] [--mem] [--csv] [--tcmd PATH] [--timeout SEC]\n"
               "                       [--verbose]\n"
               "  larson: N ops per worker per round, R rounds, M slots per worker (default 100000, 10,\n"
               "  2000); xmalloc: N objects per producer, window H per consumer (default 1000000, 256).\n");
}

int main(int argc, char **argv)
{
    cfg_t c = {.larson = 1, .workers = 2, .slots = 2000, .window = 256, .rounds = 10};
    uint64_t ops = 0;
    bench_opts_t o = BENCH_OPTS_DEFAULT;
    const char *alloc = "tcm";
    enum { O_MIX = 256, O_MODE, O_WORKERS, O_OPS, O_ROUNDS, O_SLOTS, O_WINDOW, O_ALLOC, O_MEM };
    static const struct option opts[] = {
        {"mix", required_argument, 0, O_MIX}, {"mode", required_argument, 0, O_MODE},
        {"workers", required_argument, 0, O_WORKERS}, {"ops", required_argument, 0, O_OPS},
        {"rounds", required_argument, 0, O_ROUNDS}, {"slots", required_argument, 0, O_SLOTS},
        {"window", required_argument, 0, O_WINDOW}, {"alloc", required_argument, 0, O_ALLOC},
        {"mem", no_argument, 0, O_MEM},
        BENCH_COMMON_OPTIONS,
    };
    for (int opt; (opt = bench_getopt(argc, argv, opts, &o)) != -1;) {
        switch (opt) {
        case O_MIX:
            if (strcmp(optarg, "larson") != 0 && strcmp(optarg, "xmalloc") != 0) {
                usage(stderr);
                return 2;
            }
            c.larson = strcmp(optarg, "larson") == 0;
            break;
        case O_MODE:
            if (strcmp(optarg, "threads") != 0 && strcmp(optarg, "procs") != 0) {
                usage(stderr);
                return 2;
            }
            c.procs = strcmp(optarg, "procs") == 0;
            break;
        case O_WORKERS: c.workers = (int)bench_parse_size("--workers", optarg); break;
        case O_OPS: ops = bench_parse_size("--ops", optarg); break;
        case O_ROUNDS: c.rounds = bench_parse_size("--rounds", optarg); break;
        case O_SLOTS: c.slots = bench_parse_size("--slots", optarg); break;
        case O_WINDOW: c.window = bench_parse_size("--window", optarg); break;
        case O_ALLOC: alloc = optarg; break;
        case O_MEM: c.mem = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    c.ops = ops ? ops : c.larson ? 100000 : 1000000;
    if (optind < argc || c.workers < 1 || c.workers > MAX_WORKERS || (!c.larson && c.workers % 2) ||
        c.slots < 2 || !c.window || !c.rounds || !bench_runs_ok(&o)) {
        usage(stderr);
        return 2;
    }
    timeout_s = o.timeout_s;
    c.a = bench_alloc_named(alloc);
    int is_tcm = strcmp(c.a->name, "tcm") == 0;
    if (c.procs && !is_tcm) {
        fprintf(stderr, "bench: only tcm can free another process's objects (--mode procs)\n");
        return 2;
    }
    if (c.mem && !c.larson) {
        fprintf(stderr, "bench: --mem measures the heap on the larson mix\n");
        return 2;
    }
    bench_check_system_malloc();
    bench_timeout_init("a mix run");
    bench_daemon_t daemon = {0};
    if (is_tcm)
        bench_daemon_start(&daemon, o.tcmd);
    size_t arrays = c.larson ? (size_t)c.workers * c.slots * sizeof(slot_t) : 0;
    size_t len = sizeof(shared_t) + arrays;
    c.s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c.s == MAP_FAILED) {
        perror("bench: mmap");
        return 1;
    }
    c.arrays = (slot_t *)(c.s + 1);

    const char *mix = c.larson ? "larson" : "xmalloc", *mode = c.procs ? "procs" : "threads";
    uint64_t total_ops = c.larson ? c.ops * c.rounds * (uint64_t)c.workers : c.ops * (uint64_t)(c.workers / 2);
    double t[BENCH_MAX_RUNS];
    mem_t m = {0};
    int rc = 0;
    for (int r = 0; r < o.runs; r++) {
        t[r] = run_once(&c, &daemon, &m);
        if (o.verbose)
            fprintf(stderr, "run %d %s %s %s: %.6f s\n", r + 1, mix, c.a->name, mode, t[r]);
        if (t[r] < 0) {
            fprintf(stderr, "bench: %s %s %s: run failed\n", mix, c.a->name, mode);
            rc = 1;
            goto out;
        }
    }
    if (c.mem) {
        double pct = m.peak > 0 ? 100.0 * (double)m.released / (double)m.peak : -1;
        if (o.csv)
            printf("mem,%s,%d,%lld,%lld,%lld,%lld,%lld,%lld,%.2f,%lld\n", mode, c.workers, (long long)m.live_peak,
                   (long long)m.peak, (long long)m.live_steady, (long long)m.steady, (long long)m.freed,
                   (long long)m.released, pct, (long long)m.cached);
        else
            printf("mem %s workers %d: peak live %lld committed %lld; steady live %lld committed %lld "
                   "(in use %lld, central free %lld, page heap free %lld, client caches %lld); "
                   "freed %lld; released %lld (%.2f%% of peak); harness process caches %lld\n",
                   mode, c.workers, (long long)m.live_peak, (long long)m.peak, (long long)m.live_steady,
                   (long long)m.steady, (long long)m.in_use, (long long)m.central_free, (long long)m.pageheap_free,
                   (long long)m.client_caches, (long long)m.freed, (long long)m.released, pct, (long long)m.cached);
    } else {
        bench_stats_t st = bench_stats(t, o.runs);
        double mops = (double)total_ops / st.median / 1e6;
        if (o.csv)
            printf("%s,%s,%s,%d,%llu,%.6f,%.6f,%.6f,%.3f\n", mix, c.a->name, mode, c.workers,
                   (unsigned long long)total_ops, st.median, st.min, st.max, mops);
        else
            printf("%-8s %-9s %-8s workers %-3d ops %-10llu  median %.4f s (%.4f-%.4f)  %.2f Mops/s\n", mix,
                   c.a->name, mode, c.workers, (unsigned long long)total_ops, st.median, st.min, st.max, mops);
    }
out:
    fflush(stdout);
    munmap(c.s, len);
    bench_daemon_stop(&daemon);
    return rc;
}
