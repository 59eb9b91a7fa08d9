/* walk.c — tcm-bench-walk: processes chasing pointers through one large
 * structure in the shared heap, for the heap on 2 MiB pages (issue 33):
 * what the TLB and the page tables cost when every worker of a pre-fork
 * server walks gigabytes of the one heap, with tcmd's huge_collapse_ms off
 * and on (bench/run_huge.sh drives both and prints the table).
 *
 * A builder process allocates SIZE bytes as BLOCK-sized tcm_malloc runs and
 * links their 64-byte cells (one cache line each, so every step is a miss
 * of its own) into one random cycle by Sattolo's algorithm: every cell is on
 * the cycle, so a walker started at any cell never falls into a short loop
 * that the caches would hold. The cells hold plain pointers, which every
 * attached process may follow because the heap sits at the same address in
 * all of them. The builder publishes a header under a root and holds the
 * structure (--hold, --wait-huge) while tcmd may collapse it.
 *
 * Walkers are forked from a parent that never attaches, so each attaches as
 * a client of its own and builds its own page tables, as a worker started
 * on its own would. Each finds the structure through the root, optionally
 * touches every 4 KiB page once (--touch-all: the faults are then out of the
 * timed walk, and VmPTE covers the whole structure), waits for the others
 * and takes STEPS steps from a random cell of its own. It reports wall and
 * thread CPU ns per step (more walkers than CPUs make the wall figure wait
 * for a CPU, not for memory), its VmPTE and the Rss and ShmemPmdMapped of
 * its mapping of the heap.
 *
 * --during-collapse measures what a collapse costs the clients that use
 * the memory meanwhile. The walkers start as soon as the structure is
 * published and walk until bytes_huge has reached --wait-huge (or 30 s
 * passed) and --after more seconds, timing every chunk of 64 steps (one
 * clock read per chunk keeps the clock out of the figure). With
 * --collapse-cmd (run_huge.sh: the `config set` that turns the tier on on a
 * structure built with it off) the builder runs the command --before
 * seconds after every walker is chasing, so the collapse happens under
 * walkers whose page tables map the structure with 4 KiB pages, the case
 * where a collapse must take their mappings away; without it the collapse
 * may start at the publication. Per 100 ms window each walker keeps the
 * mean, the p99 and the largest chunk, and how many chunks took over 10
 * times the window's median (a fault that waited for a 2 MiB copy, or any
 * other stall). A window is "before" if it ends before the command,
 * "during" if it lies between the command and the first bytes_huge sample
 * at the target, "after" if it begins after that (one that straddles a
 * boundary counts nowhere). Other work on the box stalls walkers in every
 * phase alike, which is why the phases are compared with each other, not
 * with zero.
 *
 * Attaches to $TCM_SOCKET (run_huge.sh starts a private tcmd).
 * Lines: build,SIZE,BLOCK,CELLS,build_s,bytes_huge_at_publish,wait_s,bytes_huge
 *        walker,I,WALKERS,SIZE,STEPS,ns_wall,ns_cpu,touch_ms,vmpte_kb,heap_rss_kb,heap_pmd_kb,pmd_pct
 *        window,I,t0_s,t1_s,phase,chunks,ns_step,p99_us,max_us,slow_chunks   (--during-collapse;
 *              times from the publication)
 *        stall,WALKERS,collapse_s, then for before, during and after each:
 *              windows,ns_step,p99_us,max_us,slow_per_s   (ns_step, p99: medians of the windows'; max:
 *              the largest chunk of all; collapse_s: from the command to bytes_huge at the target)
 * then a "# " summary line. -1 stands for a figure tcmd does not have. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "tcm.h"

#define MAX_WALKERS 64
#define MAX_WINDOWS 1024
#define MAX_SAMPLES 4096
#define CHUNK 64          /* steps per clock read in --during-collapse */
#define HUGE_LIMIT_S 30.0 /* longest wait for bytes_huge, as the issue asks */
#define POLL_S 0.1        /* bytes_huge may cost tcmd a walk of its page tables: not more often */
/* A chunk this many times its window's median waited for something other
 * than memory: a fault behind a 2 MiB copy, or the CPU taken away. Relative,
 * not in microseconds, because the median itself grows several times over
 * when another job shares the CPUs. */
#define SLOW_FACTOR 10

typedef struct cell {
    struct cell *next;
    uint64_t pad[7];
} cell_t;
_Static_assert(sizeof(cell_t) == 64, "a cell is one cache line");

typedef struct {
    uint64_t magic, size, block, ncells, nblocks;
    cell_t *blocks[];
} walk_hdr_t;
#define WALK_MAGIC 0x6b6c61772d6d6374ull

typedef struct {
    float t0, t1, ns_step, p99_us, max_us;
    uint32_t chunks, slow;
} window_t;

typedef struct {
    int ok;
    double ns_wall, ns_cpu, touch_ms;
    long vmpte_kb, rss_kb, pmd_kb;
    uint64_t sink;
    int nwin;
    window_t win[MAX_WINDOWS];
} walker_res_t;

/* Everything the processes tell each other, in a MAP_SHARED anonymous
 * mapping made before the forks. Flags are polled with short sleeps: none
 * of this is timed. */
typedef struct {
    pthread_barrier_t walk; /* the walkers start their timed walks together */
    _Atomic int published;  /* 1: the root is set; -1: the builder failed */
    _Atomic int go;         /* walkers may start */
    _Atomic int stop;       /* --during-collapse: walkers stop; after the walks: the builder frees */
    _Atomic int unhold;     /* SIGUSR1 to the parent: the builder's --hold ends now */
    _Atomic int chasing;    /* walkers past the barrier */
    double t_pub, t_cmd;    /* CLOCK_MONOTONIC (one clock for every process); t_cmd: --collapse-cmd ran */
    double build_s, wait_s; /* wait_s: -1 without --wait-huge or without bytes_huge */
    int64_t huge_at_pub, huge_after_wait;
    _Atomic int nsamples; /* bytes_huge over time, every POLL_S from the publication */
    double sample_t[MAX_SAMPLES];
    int64_t sample_huge[MAX_SAMPLES];
    walker_res_t w[MAX_WALKERS];
} shared_t;

typedef struct {
    uint64_t size, block, steps, wait_huge, seed;
    int walkers, touch_all, during;
    double hold_s, before_s, after_s;
    const char *collapse_cmd;
    char root[TCM_ROOT_NAME_MAX];
} cfg_t;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* libtcm's background thread is not the walk's */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* bytes_huge, or -1 where tcmd has no such figure (the tier is not there) */
static int64_t huge_bytes(void)
{
    uint64_t v;
    return tcm_stat("bytes_huge", &v) == 0 ? (int64_t)v : -1;
}

static cell_t *cell_at(const walk_hdr_t *h, uint64_t i)
{
    uint64_t per = h->block / sizeof(cell_t);
    return h->blocks[i / per] + i % per;
}

static void sample(shared_t *s)
{
    int n = atomic_load(&s->nsamples);
    if (n >= MAX_SAMPLES)
        return;
    s->sample_t[n] = bench_now();
    s->sample_huge[n] = huge_bytes();
    atomic_store(&s->nsamples, n + 1);
}

/* -------------------------------------------------------------- builder */

static void free_structure(walk_hdr_t *h)
{
    for (uint64_t b = 0; b < h->nblocks; b++)
        tcm_free(h->blocks[b]);
    tcm_free(h);
}

static walk_hdr_t *build(const cfg_t *c)
{
    uint64_t nblocks = (c->size + c->block - 1) / c->block, ncells = c->size / sizeof(cell_t);
    walk_hdr_t *h = tcm_malloc(sizeof *h + nblocks * sizeof h->blocks[0]);
    if (!h)
        return NULL;
    *h = (walk_hdr_t){.magic = WALK_MAGIC, .size = c->size, .block = c->block, .ncells = ncells, .nblocks = nblocks};
    for (uint64_t b = 0; b < nblocks; b++) {
        uint64_t left = c->size - b * c->block;
        if (!(h->blocks[b] = tcm_malloc(left < c->block ? left : c->block))) {
            fprintf(stderr, "walk: tcm_malloc of block %" PRIu64 " failed: %s\n", b, strerror(errno));
            h->nblocks = b;
            free_structure(h);
            return NULL;
        }
    }
    if (c->steps == 0) {
        /* a walk of no steps needs no random order: linking the cells in a
         * row touches the same pages in a fraction of the time (4 GiB) */
        for (uint64_t i = 0; i < ncells; i++)
            cell_at(h, i)->next = cell_at(h, (i + 1) % ncells);
        return h;
    }
    uint32_t *perm = malloc(ncells * sizeof *perm);
    if (!perm) {
        perror("walk: permutation");
        free_structure(h);
        return NULL;
    }
    uint64_t rng = c->seed;
    for (uint64_t i = 0; i < ncells; i++)
        perm[i] = (uint32_t)i;
    for (uint64_t i = ncells - 1; i > 0; i--) { /* Sattolo: j < i makes one cycle of all */
        uint64_t j = splitmix(&rng) % i;
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (uint64_t k = 0; k < ncells; k++)
        cell_at(h, perm[k])->next = cell_at(h, perm[(k + 1) % ncells]);
    free(perm);
    return h;
}

/* the first sample from `from` on at or over target, else the first that
 * reached the highest figure seen (a collapse that stopped short of it) */
static double collapse_done(const shared_t *s, uint64_t target, double from)
{
    int n = atomic_load(&s->nsamples), best = -1;
    for (int i = 0; i < n; i++) {
        if (s->sample_t[i] < from)
            continue;
        if (s->sample_huge[i] >= 0 && (uint64_t)s->sample_huge[i] >= target)
            return s->sample_t[i];
        if (s->sample_huge[i] > 0 && (best < 0 || s->sample_huge[i] > s->sample_huge[best]))
            best = i;
    }
    return best < 0 ? -1 : s->sample_t[best];
}

static int builder_main(const cfg_t *c, shared_t *s)
{
    if (tcm_init(NULL) != 0) {
        fprintf(stderr, "walk: builder: cannot attach to tcmd ($TCM_SOCKET)\n");
        atomic_store(&s->published, -1);
        return 1;
    }
    double t0 = bench_now();
    walk_hdr_t *h = build(c);
    int rc = h ? tcm_root_set(c->root, h) : -ENOMEM;
    if (rc != 0) {
        if (h) {
            fprintf(stderr, "walk: tcm_root_set(%s): %s\n", c->root, strerror(-rc));
            free_structure(h);
        }
        atomic_store(&s->published, -1);
        tcm_shutdown();
        return 1;
    }
    s->t_pub = bench_now();
    s->build_s = s->t_pub - t0;
    s->huge_at_pub = s->huge_after_wait = huge_bytes();
    s->wait_s = -1;
    atomic_store(&s->published, 1);
    sample(s);
    if (c->during) {
        s->t_cmd = c->collapse_cmd ? -1 : s->t_pub;
        atomic_store(&s->go, 1);
        /* the figure missing, the setting will be missing too: a short walk, all "-" */
        double done = -1, chase = -1, limit = s->huge_at_pub < 0 ? 0 : HUGE_LIMIT_S;
        while (!atomic_load(&s->stop)) {
            sleep_s(POLL_S);
            sample(s);
            int last = atomic_load(&s->nsamples) - 1;
            double now = bench_now(); /* not the sample's: a full table stops sampling, not time */
            if (s->t_cmd < 0) {
                if (chase < 0 && atomic_load(&s->chasing) == c->walkers)
                    chase = now;
                if (chase >= 0 && now - chase >= c->before_s) {
                    s->t_cmd = bench_now();
                    if (system(c->collapse_cmd) != 0)
                        fprintf(stderr, "walk: --collapse-cmd failed: %s\n", c->collapse_cmd);
                }
                continue;
            }
            if (done < 0 && s->sample_huge[last] >= (int64_t)c->wait_huge)
                done = now;
            if ((done >= 0 && now - done >= c->after_s) || now - s->t_cmd >= limit + c->after_s)
                atomic_store(&s->stop, 1);
        }
        s->huge_after_wait = s->sample_huge[atomic_load(&s->nsamples) - 1];
    } else {
        if (c->wait_huge && s->huge_at_pub >= 0) {
            int64_t v = s->huge_at_pub;
            while (v < (int64_t)c->wait_huge && bench_now() - s->t_pub < HUGE_LIMIT_S) {
                sleep_s(POLL_S);
                sample(s);
                v = s->sample_huge[atomic_load(&s->nsamples) - 1];
            }
            s->wait_s = bench_now() - s->t_pub;
            s->huge_after_wait = v;
        }
        for (double t = bench_now(); !atomic_load(&s->unhold) && (c->hold_s < 0 || bench_now() - t < c->hold_s);)
            sleep_s(0.01);
        atomic_store(&s->go, 1);
        while (!atomic_load(&s->stop))
            sleep_s(POLL_S);
    }
    tcm_root_set(c->root, NULL);
    free_structure(h);
    tcm_shutdown();
    return 0;
}

/* --------------------------------------------------------------- walker */

/* VmPTE from /proc/self/status; Rss and ShmemPmdMapped of the VMA that
 * starts at base from /proc/self/smaps (kB; -1 where not found) */
static void mapping_figures(const void *base, long *pte, long *rss, long *pmd)
{
    char line[512];
    *pte = *rss = *pmd = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "VmPTE: %ld", pte) == 1)
                break;
        fclose(f);
    }
    if (!(f = fopen("/proc/self/smaps", "r")))
        return;
    int in = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char dash;
        if (sscanf(line, "%lx%c%lx ", &lo, &dash, &hi) == 3 && dash == '-') {
            if (in)
                break;
            in = lo == (unsigned long)(uintptr_t)base;
        } else if (in) {
            long v;
            if (sscanf(line, "Rss: %ld", &v) == 1)
                *rss = v;
            else if (sscanf(line, "ShmemPmdMapped: %ld", &v) == 1)
                *pmd = v;
        }
    }
    fclose(f);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void close_window(walker_res_t *r, float *dur, uint32_t n, double t0, double t1)
{
    if (n == 0 || r->nwin >= MAX_WINDOWS)
        return;
    window_t *w = &r->win[r->nwin++];
    qsort(dur, n, sizeof *dur, cmp_float);
    *w = (window_t){.t0 = (float)t0, .t1 = (float)t1, .p99_us = dur[(uint32_t)((n - 1) * 0.99)],
                    .max_us = dur[n - 1], .chunks = n};
    double sum = 0, slow = dur[n / 2] * SLOW_FACTOR;
    for (uint32_t i = 0; i < n; i++) {
        sum += dur[i];
        w->slow += dur[i] > slow;
    }
    w->ns_step = (float)(sum * 1e3 / ((double)n * CHUNK));
}

/* Walks in chunks of CHUNK steps until the builder says stop, closing a
 * window every 100 ms; the sort that closes one is left out of every chunk. */
static cell_t *walk_windows(shared_t *s, walker_res_t *r, cell_t *p, uint64_t *steps)
{
    enum { CAP = 1 << 20 };
    float *dur = malloc(CAP * sizeof *dur);
    if (!dur)
        return p;
    uint32_t n = 0;
    double win0 = bench_now(), prev = win0;
    while (!atomic_load_explicit(&s->stop, memory_order_relaxed) && r->nwin < MAX_WINDOWS) {
        for (int i = 0; i < CHUNK; i++)
            p = p->next;
        double now = bench_now();
        dur[n++] = (float)((now - prev) * 1e6);
        *steps += CHUNK;
        prev = now;
        if (now - win0 >= POLL_S || n == CAP) {
            close_window(r, dur, n, win0 - s->t_pub, now - s->t_pub);
            n = 0;
            win0 = prev = bench_now();
        }
    }
    close_window(r, dur, n, win0 - s->t_pub, prev - s->t_pub);
    free(dur);
    return p;
}

static int walker_main(const cfg_t *c, shared_t *s, int idx)
{
    walker_res_t *r = &s->w[idx];
    if (tcm_init(NULL) != 0) {
        fprintf(stderr, "walk: walker %d: cannot attach to tcmd\n", idx);
        pthread_barrier_wait(&s->walk);
        return 1;
    }
    while (!atomic_load(&s->go) && atomic_load(&s->published) >= 0)
        sleep_s(0.001);
    walk_hdr_t *h = atomic_load(&s->published) > 0 ? tcm_root_get(c->root) : NULL;
    if (!h || h->magic != WALK_MAGIC) {
        fprintf(stderr, "walk: walker %d: no structure under root %s\n", idx, c->root);
        pthread_barrier_wait(&s->walk);
        return 1;
    }
    const char *base = (const char *)h - tcm_to_offset(h);
    uint64_t rng = c->seed + 1 + (uint64_t)idx;
    cell_t *p = cell_at(h, splitmix(&rng) % h->ncells);
    if (c->touch_all) {
        double t0 = bench_now();
        uint64_t sum = 0;
        for (uint64_t b = 0; b < h->nblocks; b++) {
            const volatile char *blk = (const char *)h->blocks[b];
            uint64_t len = b + 1 < h->nblocks ? h->block : h->size - b * h->block;
            for (uint64_t off = 0; off < len; off += 4096)
                sum += (uint64_t)blk[off];
        }
        r->touch_ms = (bench_now() - t0) * 1e3;
        r->sink += sum;
    }
    pthread_barrier_wait(&s->walk);
    atomic_fetch_add(&s->chasing, 1);
    uint64_t steps = 0;
    double t0 = bench_now(), c0 = cpu_now();
    if (c->during) {
        p = walk_windows(s, r, p, &steps);
    } else {
        for (uint64_t i = 0; i < c->steps; i++)
            p = p->next;
        steps = c->steps;
    }
    double t1 = bench_now(), c1 = cpu_now();
    r->sink += (uintptr_t)p;
    r->ns_wall = steps ? (t1 - t0) * 1e9 / (double)steps : 0;
    r->ns_cpu = steps ? (c1 - c0) * 1e9 / (double)steps : 0;
    mapping_figures(base, &r->vmpte_kb, &r->rss_kb, &r->pmd_kb);
    r->ok = 1;
    tcm_shutdown();
    return 0;
}

/* ---------------------------------------------------------------- parent */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    if (n == 0)
        return -1;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* 0 before the command, 1 during the collapse, 2 after it; -1 across a
 * boundary or where there is no command or no end */
static int phase_of(const window_t *w, double cmd, double done)
{
    if (cmd < 0)
        return -1;
    if (w->t1 <= cmd)
        return 0;
    if (done < 0)
        return -1;
    if (w->t0 >= cmd && w->t1 <= done)
        return 1;
    return w->t0 >= done ? 2 : -1;
}

/* The windows of every walker by phase (before the command, during the
 * collapse, after it): medians of their ns/step and p99s, the largest
 * chunk, slow chunks per second. */
static void report_stall(const cfg_t *c, const shared_t *s)
{
    static const char *const names[3] = {"before", "during", "after"};
    double cmd = s->t_cmd < 0 ? -1 : s->t_cmd - s->t_pub;
    double done = s->t_cmd < 0 ? -1 : collapse_done(s, c->wait_huge, s->t_cmd);
    done = done < 0 ? -1 : done - s->t_pub;
    static double ns[3][MAX_WALKERS * MAX_WINDOWS], p99[3][MAX_WALKERS * MAX_WINDOWS];
    int n[3] = {0};
    double mx[3] = {0}, slow[3] = {0}, secs[3] = {0};
    for (int i = 0; i < c->walkers; i++) {
        const walker_res_t *r = &s->w[i];
        for (int k = 0; k < r->nwin; k++) {
            const window_t *w = &r->win[k];
            int ph = phase_of(w, cmd, done);
            printf("window,%d,%.3f,%.3f,%s,%u,%.1f,%.2f,%.2f,%u\n", i, w->t0, w->t1, ph < 0 ? "-" : names[ph],
                   w->chunks, w->ns_step, w->p99_us, w->max_us, w->slow);
            if (ph < 0)
                continue;
            ns[ph][n[ph]] = w->ns_step;
            p99[ph][n[ph]++] = w->p99_us;
            mx[ph] = w->max_us > mx[ph] ? w->max_us : mx[ph];
            slow[ph] += w->slow;
            secs[ph] += w->t1 - w->t0;
        }
    }
    double med_ns[3], med_p99[3], rate[3];
    printf("stall,%d,%.2f", c->walkers, done < 0 ? -1 : done - cmd);
    for (int ph = 0; ph < 3; ph++) {
        med_ns[ph] = median(ns[ph], n[ph]);
        med_p99[ph] = median(p99[ph], n[ph]);
        rate[ph] = secs[ph] > 0 ? slow[ph] / secs[ph] : -1;
        printf(",%d,%.1f,%.2f,%.2f,%.1f", n[ph], med_ns[ph], med_p99[ph], mx[ph], rate[ph]);
    }
    printf("\n");
    if (done < 0) {
        printf("# during collapse: bytes_huge never rose: nothing to compare\n");
        return;
    }
    printf("# collapse took %.1f s; per phase, windows: ns/step, p99 of %d-step chunks (medians), max chunk, "
           "chunks over %dx their window's median per s:",
           done - cmd, CHUNK, SLOW_FACTOR);
    for (int ph = 0; ph < 3; ph++)
        printf(" %s %d: %.1f ns, %.1f us, %.0f us, %.1f/s;", names[ph], n[ph], med_ns[ph], med_p99[ph], mx[ph],
               rate[ph]);
    printf("\n");
}

static shared_t *shared;
static void on_usr1(int sig)
{
    (void)sig;
    atomic_store(&shared->unhold, 1);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tcm-bench-walk [--size S] [--block S] [--walkers N] [--steps M] [--touch-all]\n"
               "                      [--hold SEC] [--wait-huge BYTES]\n"
               "                      [--during-collapse [--collapse-cmd CMD [--before SEC]] [--after SEC]]\n"
               "                      [--seed N] [--timeout SEC]\n"
               "  --size S          bytes of the structure (default 1G)\n"
               "  --block S         bytes of each tcm_malloc run it is made of (default 64M)\n"
               "  --walkers N       walker processes (default 2)\n"
               "  --steps M         pointer-chase steps per walker (default 20M; 0: touch only)\n"
               "  --touch-all       walkers read every 4 KiB page once before the timed walk\n"
               "  --hold SEC        the builder waits this long after publishing (default 0; -1: until\n"
               "                    SIGUSR1 to this process, which also ends a shorter hold)\n"
               "  --wait-huge B     ... and first until tcmd's bytes_huge reaches B (at most 30 s)\n"
               "  --during-collapse walkers start at the publication and walk until bytes_huge\n"
               "                    reaches --wait-huge and --after SEC more (default 2)\n"
               "  --collapse-cmd C  ... the builder runs C (sh -c) --before SEC (default 1) after\n"
               "                    every walker is chasing: what starts the collapse\n"
               "attaches to $TCM_SOCKET; see the comment at the top of bench/walk.c for the output\n");
}

int main(int argc, char **argv)
{
    cfg_t c = {.size = 1ull << 30, .block = 64ull << 20, .steps = 20000000, .seed = 1, .walkers = 2, .before_s = 1,
               .after_s = 2};
    unsigned timeout_s = 300;
    enum {
        O_SIZE = 256, O_BLOCK, O_WALKERS, O_STEPS, O_TOUCH, O_HOLD, O_WAIT, O_DURING, O_CMD, O_BEFORE, O_AFTER,
        O_SEED, O_TIMEOUT
    };
    static const struct option opts[] = {
        {"size", required_argument, 0, O_SIZE},       {"block", required_argument, 0, O_BLOCK},
        {"walkers", required_argument, 0, O_WALKERS}, {"steps", required_argument, 0, O_STEPS},
        {"touch-all", no_argument, 0, O_TOUCH},       {"hold", required_argument, 0, O_HOLD},
        {"wait-huge", required_argument, 0, O_WAIT},  {"during-collapse", no_argument, 0, O_DURING},
        {"collapse-cmd", required_argument, 0, O_CMD}, {"before", required_argument, 0, O_BEFORE},
        {"after", required_argument, 0, O_AFTER},     {"seed", required_argument, 0, O_SEED},
        {"timeout", required_argument, 0, O_TIMEOUT}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    for (int opt; (opt = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (opt) {
        case O_SIZE: c.size = bench_parse_size("--size", optarg); break;
        case O_BLOCK: c.block = bench_parse_size("--block", optarg); break;
        case O_WALKERS: c.walkers = (int)bench_parse_size("--walkers", optarg); break;
        case O_STEPS: c.steps = bench_parse_size("--steps", optarg); break;
        case O_TOUCH: c.touch_all = 1; break;
        case O_HOLD: c.hold_s = atof(optarg); break;
        case O_WAIT: c.wait_huge = bench_parse_size("--wait-huge", optarg); break;
        case O_DURING: c.during = 1; break;
        case O_CMD: c.collapse_cmd = optarg; break;
        case O_BEFORE: c.before_s = atof(optarg); break;
        case O_AFTER: c.after_s = atof(optarg); break;
        case O_SEED: c.seed = bench_parse_size("--seed", optarg); break;
        case O_TIMEOUT: timeout_s = (unsigned)bench_parse_size("--timeout", optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    /* cells are numbered in 32 bits by the builder's permutation */
    if (optind < argc || c.walkers < 1 || c.walkers > MAX_WALKERS || c.block < 4096 || c.block % sizeof(cell_t) ||
        c.size < c.block || c.size % sizeof(cell_t) || c.size / sizeof(cell_t) > UINT32_MAX ||
        c.before_s < 0 || c.after_s < 0 || (c.during && (!c.wait_huge || !c.steps))) {
        usage(stderr);
        return 2;
    }
    snprintf(c.root, sizeof c.root, "walk.%d", (int)getpid());
    shared_t *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("walk: mmap");
        return 1;
    }
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&s->walk, &ba, (unsigned)c.walkers);
    shared = s;
    /* SA_RESTART: the signal must not cut the parent's waitpid short */
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_RESTART};
    sigaction(SIGUSR1, &sa, NULL);
    bench_timeout_init("a walk");
    alarm(timeout_s);

    pid_t builder = bench_fork();
    if (builder == 0)
        _exit(builder_main(&c, s));
    pid_t pid[MAX_WALKERS];
    for (int i = 0; i < c.walkers; i++)
        if ((pid[i] = bench_fork()) == 0)
            _exit(walker_main(&c, s, i));
    int failed = 0, status;
    for (int i = 0; i < c.walkers; i++) {
        waitpid(pid[i], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0 || !s->w[i].ok;
    }
    atomic_store(&s->stop, 1);
    waitpid(builder, &status, 0);
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (atomic_load(&s->published) <= 0)
        return 1;

    uint64_t ncells = c.size / sizeof(cell_t);
    printf("build,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.2f,%" PRId64 ",%.2f,%" PRId64 "\n", c.size, c.block, ncells,
           s->build_s, s->huge_at_pub, s->wait_s, s->huge_after_wait);
    if (c.wait_huge && !c.during) {
        if (s->huge_at_pub < 0)
            printf("# bytes_huge: tcmd has no such figure (no 2 MiB tier): not waited for\n");
        else
            printf("# bytes_huge reached %" PRId64 " of %" PRIu64 " asked %.2f s after publishing (%s)\n",
                   s->huge_after_wait, c.wait_huge, s->wait_s,
                   s->huge_after_wait >= (int64_t)c.wait_huge ? "reached" : "gave up");
    }
    double ns[MAX_WALKERS], cpu[MAX_WALKERS], pte[MAX_WALKERS], pct[MAX_WALKERS];
    int n = 0;
    for (int i = 0; i < c.walkers; i++) {
        const walker_res_t *r = &s->w[i];
        if (!r->ok)
            continue;
        double pc = r->rss_kb > 0 && r->pmd_kb >= 0 ? 100.0 * (double)r->pmd_kb / (double)r->rss_kb : -1;
        printf("walker,%d,%d,%" PRIu64 ",%" PRIu64 ",%.2f,%.2f,%.1f,%ld,%ld,%ld,%.1f\n", i, c.walkers, c.size,
               c.steps, r->ns_wall, r->ns_cpu, r->touch_ms, r->vmpte_kb, r->rss_kb, r->pmd_kb, pc);
        ns[n] = r->ns_wall, cpu[n] = r->ns_cpu, pte[n] = (double)r->vmpte_kb, pct[n] = pc;
        n++;
    }
    if (c.during)
        report_stall(&c, s);
    if (n)
        printf("# %d walkers, %.2f GiB in %" PRIu64 " MiB blocks: median %.1f ns/step (cpu %.1f), VmPTE %.0f kB, "
               "heap PmdMapped %.1f%% of Rss\n",
               c.walkers, (double)c.size / (1 << 30), c.block >> 20, median(ns, n), median(cpu, n), median(pte, n),
               median(pct, n));
    return failed;
}
