/* handoff.c — tcm-bench-handoff: one side allocates, the other frees.
 *
 * A producer allocates objects of SIZE bytes, writes the first byte and
 * passes the pointers through a single-producer/single-consumer ring to a
 * consumer that reads the byte and frees them. Modes:
 *   procs    producer and consumer are two processes (fork) attached to the
 *            same tcmd: only a shared heap can do this, so only tcm;
 *   threads  two threads of one process, the in-process reference (glibc or
 *            whatever malloc this binary is linked with, and tcm too).
 * The ring, the counters and the barriers live in a MAP_SHARED anonymous
 * mapping created before fork, so both modes run the very same code. Timing
 * is the seed's: both sides warm up, wait on a barrier, the parent takes the
 * time, releases them and takes it again when both are done. */
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

#define RING_CAP 1024u /* power of two; bounds the objects in flight */

typedef struct {
    _Alignas(64) _Atomic uint64_t head; /* next slot the consumer takes */
    _Alignas(64) _Atomic uint64_t tail; /* next slot the producer fills */
    _Alignas(64) pthread_barrier_t ready, go, done;
    _Atomic int failed;
    _Atomic uint64_t checksum;
    void *slot[RING_CAP];
} shared_t;

typedef struct {
    shared_t *s;
    const bench_alloc_t *a;
    size_t size;
    uint64_t pairs, warmup;
    int producer;
    int attach; /* a forked child of a tcm run attaches itself */
} side_t;

/* Busy-wait a little, then let the other side (and tcmd) have the CPU: on a
 * 2-core box a pure spin would starve whoever we are waiting for. */
static void backoff(unsigned *spins)
{
    if (++*spins < 256)
        __builtin_ia32_pause();
    else
        sched_yield();
}

static void produce(const side_t *d, uint64_t n)
{
    shared_t *s = d->s;
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
    for (uint64_t i = 0; i < n; i++) {
        char *p = d->a->alloc(d->size);
        if (p)
            p[0] = (char)i;
        else
            atomic_store(&s->failed, 1); /* NULL still travels: free(NULL) is fine */
        for (unsigned spins = 0; tail - head == RING_CAP;) {
            head = atomic_load_explicit(&s->head, memory_order_acquire);
            if (tail - head == RING_CAP)
                backoff(&spins);
        }
        s->slot[tail & (RING_CAP - 1)] = p;
        atomic_store_explicit(&s->tail, ++tail, memory_order_release);
    }
}

static void consume(const side_t *d, uint64_t n)
{
    shared_t *s = d->s;
    uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        for (unsigned spins = 0; head == tail;) {
            tail = atomic_load_explicit(&s->tail, memory_order_acquire);
            if (head == tail)
                backoff(&spins);
        }
        char *p = s->slot[head & (RING_CAP - 1)];
        if (p)
            sum += (unsigned char)p[0];
        d->a->release(p);
        atomic_store_explicit(&s->head, ++head, memory_order_release);
    }
    atomic_fetch_add(&s->checksum, sum);
}

static void *side_main(void *arg)
{
    const side_t *d = arg;
    if (d->attach && tcm_init(NULL) != 0)
        atomic_store(&d->s->failed, 1); /* tcm_malloc then returns NULL */
    void (*work)(const side_t *, uint64_t) = d->producer ? produce : consume;
    work(d, d->warmup);
    pthread_barrier_wait(&d->s->ready);
    pthread_barrier_wait(&d->s->go);
    work(d, d->pairs);
    pthread_barrier_wait(&d->s->done);
    if (d->attach)
        tcm_shutdown(); /* hand the caches back before _exit */
    return NULL;
}

static unsigned timeout_s = 300;

/* One timed run: seconds, or negative on failure. */
static double run_once(shared_t *s, const bench_alloc_t *a, int procs, size_t size, uint64_t pairs)
{
    pthread_barrierattr_t attr;
    pthread_barrierattr_init(&attr);
    pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(&s->ready, &attr, 3);
    pthread_barrier_init(&s->go, &attr, 3);
    pthread_barrier_init(&s->done, &attr, 3);
    pthread_barrierattr_destroy(&attr);
    atomic_store(&s->head, 0);
    atomic_store(&s->tail, 0);
    atomic_store(&s->failed, 0);

    side_t sides[2];
    pid_t pid[2] = {0, 0};
    pthread_t tid[2];
    uint64_t warm = pairs < 65536 ? pairs : 65536;
    for (int i = 0; i < 2; i++) {
        sides[i] = (side_t){.s = s, .a = a, .size = size, .pairs = pairs, .warmup = warm, .producer = i == 0,
                            .attach = procs};
        if (!procs) {
            if (pthread_create(&tid[i], NULL, side_main, &sides[i]) != 0) {
                perror("bench: pthread_create");
                exit(1);
            }
            continue;
        }
        if ((pid[i] = bench_fork()) == 0) {
            side_main(&sides[i]);
            _exit(0);
        }
    }
    alarm(timeout_s);
    pthread_barrier_wait(&s->ready);
    double t0 = bench_now();
    pthread_barrier_wait(&s->go);
    pthread_barrier_wait(&s->done);
    double t1 = bench_now();
    int failed = 0;
    for (int i = 0; i < 2; i++) {
        if (!procs) {
            pthread_join(tid[i], NULL);
            continue;
        }
        int status;
        waitpid(pid[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "bench: %s side ended with status 0x%x\n", i ? "consumer" : "producer", status);
            failed = 1;
        }
    }
    alarm(0);
    pthread_barrier_destroy(&s->ready);
    pthread_barrier_destroy(&s->go);
    pthread_barrier_destroy(&s->done);
    return failed || atomic_load(&s->failed) ? -1 : t1 - t0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tcm-bench-handoff [--size S] [--pairs P] [--runs R] [--cases LIST] [--csv]\n"
               "                         [--tcmd PATH] [--timeout SEC] [--verbose]\n"
               "  LIST: comma-separated ALLOC:MODE, MODE procs or threads;\n"
               "        default tcm:procs,tcm:threads,SYSTEM:threads\n"
               "  CSV: allocator,mode,size,pairs,median_s,min_s,max_s,mpairs_per_s\n");
}

int main(int argc, char **argv)
{
    size_t size = 64;
    uint64_t pairs = 2000000;
    bench_opts_t o = BENCH_OPTS_DEFAULT;
    char cases_buf[256] = "";
    enum { O_SIZE = 256, O_PAIRS, O_CASES };
    static const struct option opts[] = {
        {"size", required_argument, 0, O_SIZE}, {"pairs", required_argument, 0, O_PAIRS},
        {"cases", required_argument, 0, O_CASES},
        BENCH_COMMON_OPTIONS,
    };
    for (int opt; (opt = bench_getopt(argc, argv, opts, &o)) != -1;) {
        switch (opt) {
        case O_SIZE: size = bench_parse_size("--size", optarg); break;
        case O_PAIRS: pairs = bench_parse_size("--pairs", optarg); break;
        case O_CASES: snprintf(cases_buf, sizeof cases_buf, "%s", optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || !size || !pairs || !bench_runs_ok(&o)) {
        usage(stderr);
        return 2;
    }
    timeout_s = o.timeout_s;

    size_t nall;
    const bench_alloc_t *all = bench_allocs(&nall);
    if (!cases_buf[0])
        snprintf(cases_buf, sizeof cases_buf, "tcm:procs,tcm:threads,%s:threads", all[1].name);
    struct {
        const bench_alloc_t *a;
        int procs;
    } cases[8];
    int n = 0, need_tcm = 0;
    for (char *save = NULL, *tok = strtok_r(cases_buf, ",", &save); tok && n < 8;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        const char *mode = colon ? colon + 1 : "threads";
        if (colon)
            *colon = 0;
        size_t i;
        bench_pick_allocs(tok, &i, 1);
        cases[n].a = &all[i];
        cases[n].procs = strcmp(mode, "procs") == 0;
        if (!cases[n].procs && strcmp(mode, "threads") != 0) {
            fprintf(stderr, "bench: mode must be procs or threads, not '%s'\n", mode);
            return 2;
        }
        int is_tcm = strcmp(all[i].name, "tcm") == 0;
        if (cases[n].procs && !is_tcm) {
            fprintf(stderr, "bench: only tcm can hand objects to another process (%s:procs)\n", all[i].name);
            return 2;
        }
        need_tcm |= is_tcm;
        n++;
    }

    bench_check_system_malloc();
    bench_timeout_init("a handoff run");
    bench_daemon_t daemon = {0};
    if (need_tcm)
        bench_daemon_start(&daemon, o.tcmd);
    shared_t *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) {
        perror("bench: mmap");
        return 1;
    }

    double t[8][BENCH_MAX_RUNS];
    int rc = 0;
    for (int r = 0; r < o.runs; r++) {
        for (int k = 0; k < n; k++) {
            int j = r % 2 ? n - 1 - k : k;
            t[j][r] = run_once(s, cases[j].a, cases[j].procs, size, pairs);
            if (o.verbose)
                fprintf(stderr, "run %d %s:%s: %.6f s\n", r + 1, cases[j].a->name,
                        cases[j].procs ? "procs" : "threads", t[j][r]);
            if (t[j][r] < 0) {
                fprintf(stderr, "bench: %s:%s: handoff failed (size %zu)\n", cases[j].a->name,
                        cases[j].procs ? "procs" : "threads", size);
                rc = 1;
                goto out;
            }
        }
    }
    for (int k = 0; k < n; k++) {
        bench_stats_t st = bench_stats(t[k], o.runs);
        const char *mode = cases[k].procs ? "procs" : "threads";
        double mps = (double)pairs / st.median / 1e6;
        if (o.csv)
            printf("%s,%s,%zu,%llu,%.6f,%.6f,%.6f,%.3f\n", cases[k].a->name, mode, size,
                   (unsigned long long)pairs, st.median, st.min, st.max, mps);
        else
            printf("%-9s %-8s size %-6zu pairs %-9llu  median %.4f s (%.4f-%.4f)  %.2f Mpairs/s\n",
                   cases[k].a->name, mode, size, (unsigned long long)pairs, st.median, st.min, st.max, mps);
    }
out:
    fflush(stdout);
    munmap(s, sizeof *s);
    bench_daemon_stop(&daemon);
    return rc;
}
