/* workload.c — see workload.h. */
#define _GNU_SOURCE
#include "workload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"

#define LIVE 256

typedef struct obj {
    uint64_t tag, size, serial; /* serial: unique per allocation of the whole run */
} obj_t;

static wl_shared_t *wl;

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t tag_of(const obj_t *o)
{
    return ((uint64_t)(uintptr_t)o * 0x9e3779b97f4a7c15ull ^ o->size) + o->serial * 0xbf58476d1ce4e5b9ull;
}

/* want: the tag this process wrote (0 for an object from another process,
 * which can only be checked against itself). Two processes handed the same
 * object write different serials, so the first to free it notices. */
static void check_and_free(obj_t *o, uint64_t want)
{
    CHECK_EQ(o->tag, tag_of(o));
    if (want)
        CHECK_EQ(o->tag, want);
    CHECK_GE(tcm_usable_size(o), o->size);
    unsigned char *tail = (unsigned char *)o + o->size - 1;
    CHECK_EQ(*tail, (unsigned char)o->tag);
    o->tag = 0; /* a second hand-out of the same object fails the check above */
    tcm_free(o);
}

static obj_t *make(uint64_t *seed)
{
    uint64_t r = rnd(seed) % 100;
    size_t size = r < 60   ? sizeof(obj_t) + 1 + rnd(seed) % 2000
                  : r < 96 ? 4096 + rnd(seed) % 60000
                           : 300000 + rnd(seed) % 700000;
    obj_t *o = tcm_malloc(size);
    if (!o) {
        atomic_fetch_add(&wl->failures, 1);
        return NULL;
    }
    o->size = size;
    o->serial = atomic_fetch_add(&wl->serial, 1) + 1;
    o->tag = tag_of(o);
    *((unsigned char *)o + size - 1) = (unsigned char)o->tag;
    return o;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A process attaching for the first time gives up at once when tcmd is
 * not there (a kill may have just happened), and after TCM_FRESH_ATTACH_MS
 * when it does not answer (on a loaded 2-CPU box, a tcmd reclaiming a
 * dead worker and checking the whole heap beside other tests' daemons:
 * stress.client_kill's CI run once); these workers start while tcmd is
 * being killed and restarted, so they wait for it themselves. */
static void attach_waiting(void)
{
    uint64_t t0 = now_ms();
    int rc;
    while ((rc = tcm_init(NULL)) == -ECONNREFUSED || rc == -ECONNRESET || rc == -EPIPE || rc == -ENOENT ||
           rc == -ETIMEDOUT) {
        CHECK_LT(now_ms() - t0, 60000);
        usleep(20000);
    }
    CHECK_EQ(rc, 0);
}

static int worker(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg, seed = 0x2545f4914f6cdd1dull * id + 7;
    obj_t *live[LIVE] = {0};
    uint64_t tags[LIVE] = {0};
    attach_waiting();
    atomic_fetch_add(&wl->ready, 1);
    for (uint64_t op = 1; !atomic_load(&wl->stop); op++) {
        size_t i = rnd(&seed) % LIVE;
        uint64_t r = rnd(&seed) % 100;
        if (r < 10 && live[i]) { /* to another process */
            uint64_t expected = 0;
            if (atomic_compare_exchange_strong(&wl->exchange[rnd(&seed) % WL_EXCHANGE], &expected,
                                               tcm_to_offset(live[i]))) {
                live[i] = NULL;
                atomic_fetch_add(&wl->handed_over, 1);
            }
        } else if (r < 20) { /* from another process */
            uint64_t off = atomic_exchange(&wl->exchange[rnd(&seed) % WL_EXCHANGE], 0);
            if (off)
                check_and_free(tcm_from_offset(off), 0);
        } else {
            if (live[i])
                check_and_free(live[i], tags[i]);
            live[i] = make(&seed);
            tags[i] = live[i] ? live[i]->tag : 0;
        }
        if (op % 3000 == 0) { /* everything back: spans empty and go back to the page heap */
            char name[32];
            snprintf(name, sizeof name, "wl-%llu", (unsigned long long)id);
            for (size_t k = 0; k < LIVE; k++)
                if (live[k]) {
                    check_and_free(live[k], tags[k]);
                    live[k] = NULL;
                }
            live[0] = make(&seed);
            tags[0] = live[0] ? live[0]->tag : 0;
            CHECK_NE(tcm_root_set(name, live[0]), -EINVAL);
        }
        atomic_fetch_add(&wl->ops, 1);
    }
    for (size_t k = 0; k < LIVE; k++)
        if (live[k])
            check_and_free(live[k], tags[k]);
    tcm_shutdown();
    return 0;
}

wl_shared_t *wl_shared(void)
{
    wl = mmap(NULL, sizeof *wl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(wl != MAP_FAILED);
    return wl;
}


void wl_wait_ops(wl_shared_t *sh, uint64_t more)
{
    uint64_t want = atomic_load(&sh->ops) + more, t0 = now_ms();
    while (atomic_load(&sh->ops) < want) {
        if (now_ms() - t0 > 60000) {
            fprintf(stderr, "workload stalled at %llu ops\n", (unsigned long long)atomic_load(&sh->ops));
            abort();
        }
        usleep(2000);
    }
}

pid_t wl_spawn_one(wl_shared_t *sh, int id)
{
    (void)sh;
    return tt_fork(worker, (void *)(uintptr_t)id);
}

void wl_spawn(wl_shared_t *sh, int n, pid_t *pids)
{
    memset(sh, 0, sizeof *sh);
    for (int i = 0; i < n; i++)
        pids[i] = wl_spawn_one(sh, i + 1);
}

void wl_wait_ready(wl_shared_t *sh, int n)
{
    uint64_t t0 = now_ms();
    while (atomic_load(&sh->ready) < n) {
        CHECK_LT(now_ms() - t0, 60000);
        usleep(2000);
    }
}

void wl_start(wl_shared_t *sh, int n, pid_t *pids, uint64_t min_ops)
{
    wl_spawn(sh, n, pids);
    wl_wait_ready(sh, n);
    wl_wait_ops(sh, min_ops);
}

uint64_t wl_stop(wl_shared_t *sh, int n, pid_t *pids)
{
    atomic_store(&sh->stop, 1);
    for (int i = 0; i < n; i++)
        tt_wait_ok(pids[i], 120000);
    /* what is still in the exchange was allocated by workers that are gone */
    bool attached = false;
    for (size_t e = 0; e < WL_EXCHANGE; e++) {
        uint64_t off = atomic_exchange(&sh->exchange[e], 0);
        if (!off)
            continue;
        if (!attached)
            attach_waiting();
        attached = true;
        check_and_free(tcm_from_offset(off), 0);
    }
    if (attached)
        tcm_shutdown();
    return atomic_load(&sh->failures);
}

void wl_stress_start(wl_stress_t *s, int argc, char **argv, int kills, uint64_t seed)
{
    s->kills = argc > 1 ? atoi(argv[1]) : kills;
    s->seed = seed;
    s->wl = wl_shared();
    tt_daemon_start(&s->d, NULL);
    wl_start(s->wl, WL_STRESS_WORKERS, s->pids, 2000);
}

uint64_t wl_stress_next(wl_stress_t *s, unsigned min_us, unsigned span_us)
{
    s->seed = s->seed * 6364136223846793005ull + 1442695040888963407ull;
    usleep((useconds_t)(min_us + (s->seed >> 33) % span_us));
    return s->seed;
}
