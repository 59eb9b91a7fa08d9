/* What a program under libtcm-malloc.so allocates is its own (the drop-in's
 * private heap): run under LD_PRELOAD by preload_test.sh.
 *   tcm_preload_private where   prints where malloc puts a small and a large
 *                               block (the test checks both lie outside
 *                               tcmd's shared heap)
 *   tcm_preload_private fork    a child sees its parent's memory as it was
 *                               at the fork, its writes stay its own, and
 *                               it goes on allocating from the same heap
 *                               (not the system malloc); prints "ok"
 *   tcm_preload_private sparse  a few objects of each of ~40 sizes keep
 *                               their own pages in memory, not the spans
 *                               they come from (SPARSE_MAX_KB)
 *   tcm_preload_private grow    buffers grown by realloc through every
 *                               small class leave no more than
 *                               GROW_CACHED_MAX_KB cached behind them
 *   tcm_preload_private flow    objects of 32 classes allocated and then
 *                               freed leave no more than
 *                               FLOW_CACHED_MAX_KB cached
 *   tcm_preload_private sweep   a loop of more objects of a class than a
 *                               bin's room on a private heap then runs
 *                               without refills (SWEEP_REQUESTS_MAX)
 *   tcm_preload_private threads threads that each use a few objects of
 *                               ~40 sizes cost the process little memory
 *                               each (THREAD_MAX_KB)
 *   tcm_preload_private calloc  a calloc of fresh pages, or of pages freed
 *                               sparsely written, maps none of them
 *                               (CALLOC_TOUCH_MAX_KB); one of pages that
 *                               come back written reads zero too
 *   tcm_preload_private start   a program with a small heap has no thread
 *                               of the library's, and a block it writes a
 *                               byte of maps that byte's page, not the
 *                               block (START_TOUCH_MAX_KB); one whose heap
 *                               grows past BG_AFTER_BYTES (client/local.c)
 *                               has the background thread */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rss.h"

#define N 4096

/* The mapping of /proc/self/maps that holds p: its start and end. */
static int mapping_of(const void *p, uintptr_t *lo, uintptr_t *hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[512];
    int found = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, lo, hi) == 2 && (uintptr_t)p >= *lo && (uintptr_t)p < *hi) {
            found = 0;
            break;
        }
    fclose(f);
    return found;
}

static int fail(const char *what)
{
    fprintf(stderr, "tcm_preload_private: %s\n", what);
    return 1;
}

/* The drop-in's tcm_stat (NULL: not under libtcm-malloc.so). */
typedef int (*stat_fn_t)(const char *, uint64_t *);
static stat_fn_t stat_fn(void)
{
    return (stat_fn_t)dlsym(RTLD_DEFAULT, "tcm_stat");
}

static int fork_case(void)
{
    char **v = malloc(N * sizeof *v);
    for (int i = 0; i < N; i++) {
        v[i] = malloc(32 + i % 200);
        snprintf(v[i], 32, "parent %d", i);
    }
    uintptr_t lo, hi;
    if (mapping_of(v[0], &lo, &hi) != 0)
        return fail("no mapping holds the parent's block");
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return fail("pipe");
    pid_t pid = fork();
    if (pid == 0) {
        char c;
        if (read(pipefd[0], &c, 1) != 1) /* the parent has changed its memory since the fork */
            _exit(2);
        for (int i = 0; i < N; i++) {
            char want[32];
            snprintf(want, sizeof want, "parent %d", i);
            if (strcmp(v[i], want) != 0)
                _exit(3); /* not the heap as it was at the fork */
        }
        for (int i = 0; i < N; i += 2) {
            free(v[i]); /* the child's copy: freed in the child only */
            v[i] = malloc(64);
            snprintf(v[i], 64, "child %d", i);
            uintptr_t clo, chi;
            if (mapping_of(v[i], &clo, &chi) != 0 || clo != lo)
                _exit(4); /* not from the heap it inherited */
        }
        _exit(0);
    }
    for (int i = 0; i < N; i++)
        snprintf(v[i], 32, "later %d", i);
    if (write(pipefd[1], "x", 1) != 1)
        return fail("write");
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "tcm_preload_private: the child exited with status 0x%x\n", st);
        return 1;
    }
    for (int i = 0; i < N; i++) {
        char want[32];
        snprintf(want, sizeof want, "later %d", i);
        if (strcmp(v[i], want) != 0)
            return fail("the child's writes reached the parent");
        free(v[i]);
    }
    free(v);
    printf("ok\n");
    return 0;
}

/* Anonymous memory faults in 2 MiB at a time where transparent huge pages
 * are always on: what a case counts of pages touched is not measured there. */
static bool huge_pages_always(void)
{
    char line[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(line, sizeof line, f))
            line[0] = 0;
        fclose(f);
    }
    return strstr(line, "[always]") != NULL;
}

static int not_measured(void)
{
    printf("not measured (transparent huge pages always: anonymous memory faults in 2 MiB at a time)\n");
    return 0;
}

/* Kilobytes of the mapping that holds p resident in this process (the
 * heap's, merged with the private heap's other anonymous mappings). */
static long resident_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    bool in = false;
    long kb = -1, v;
    while (kb < 0 && fgets(line, sizeof line, f)) {
        uintptr_t lo, hi;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2)
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && sscanf(line, "Rss: %ld kB", &v) == 1)
            kb = v;
    }
    fclose(f);
    return kb;
}

/* Two objects of each of ~40 sizes up to 4 KiB: their spans mapped whole
 * were 2.7 MiB more resident, their own pages and the records of the
 * sizes' spans and bins are ~15 KiB a size (0.5 MiB). */
#define SPARSE_MAX_KB 1536

static int sparse_case(void)
{
    if (huge_pages_always())
        return not_measured();
    void *keep[128];
    int n = 0;
    keep[n++] = malloc(16);
    long before = resident_kb(keep[0]);
    for (size_t size = 32; size <= 4096 && n + 2 <= 128; size += size / 8 > 16 ? size / 8 : 16)
        for (int k = 0; k < 2; k++) {
            keep[n] = malloc(size);
            memset(keep[n++], 0x5a, size);
        }
    long grew = resident_kb(keep[0]) - before;
    printf("%d objects of %d sizes: %ld KiB more of the heap resident\n", n - 1, (n - 1) / 2, grew);
    for (int i = 0; i < n; i++)
        free(keep[i]);
    return before >= 0 && grew < SPARSE_MAX_KB ? 0 : fail("the spans of a few objects are resident whole");
}

/* GROW_BUFFERS buffers grown in turn by realloc, 8 bytes a step, to 8 000
 * bytes, as redis grows its listpacks: each passes through every class up
 * to 8 KiB, and the blocks it leaves behind are of classes the program has
 * outgrown. The thread's bins kept them all, up to its budget: 16 MiB
 * cached beside 8 MiB in use; a bin now keeps TCM_OUTGROWN_BYTES of them
 * and hands the rest back (client/tcache.c, tcm__free_outgrown). */
#define GROW_BUFFERS 1000
#define GROW_CACHED_MAX_KB 4096

static int grow_case(void)
{
    stat_fn_t stat = stat_fn();
    static char *buf[GROW_BUFFERS];
    if (!stat)
        return fail("no tcm_stat: not under libtcm-malloc.so");
    for (size_t len = 8; len <= 8000; len += 8)
        for (int i = 0; i < GROW_BUFFERS; i++) {
            buf[i] = realloc(buf[i], len);
            if (!buf[i])
                return fail("realloc");
            memset(buf[i] + len - 8, 0x5a, 8);
        }
    uint64_t held = 0, live = 0;
    for (int i = 0; i < GROW_BUFFERS; i++)
        live += malloc_usable_size(buf[i]);
    if (stat("bytes_clients", &held) != 0)
        return fail("tcm_stat(bytes_clients)");
    long cached_kb = (long)((held - live) >> 10);
    printf("%d buffers grown by realloc to 8000 bytes: %" PRIu64 " KiB in use, %ld KiB cached\n", GROW_BUFFERS,
           live >> 10, cached_kb);
    /* every move kept the bytes, and so does a shrink into a smaller class */
    for (size_t len = 8000; len >= 8; len /= 3)
        for (int i = 0; i < GROW_BUFFERS; i++) {
            for (size_t k = 0; k < len; k++)
                if (buf[i][k] != 0x5a)
                    return fail("realloc lost a buffer's bytes");
            if (!(buf[i] = realloc(buf[i], len / 3)))
                return fail("realloc");
        }
    for (int i = 0; i < GROW_BUFFERS; i++)
        free(buf[i]);
    return cached_kb < GROW_CACHED_MAX_KB ? 0 : fail("the blocks realloc moved out of stay cached");
}

/* FLOW_OBJECTS objects of 8-512 bytes allocated, then all freed: each
 * class's bin meets its full end again and again, as a thread's does that
 * frees what others allocate (xmalloc's ring). A room that grew at each
 * quick overflow kept up to the thread's budget (15 851 KiB); a private
 * heap's stops at PRIVATE_ROOM_BYTES a class unless the class also
 * empties its bin soon after (client/tcache.c): 1 232 KiB. */
#define FLOW_OBJECTS 200000
#define FLOW_CACHED_MAX_KB 4096

static int flow_case(void)
{
    stat_fn_t stat = stat_fn();
    static void *v[FLOW_OBJECTS];
    unsigned s = 1;
    uint64_t held = 0;
    if (!stat)
        return fail("no tcm_stat: not under libtcm-malloc.so");
    for (int i = 0; i < FLOW_OBJECTS; i++) {
        s = s * 1103515245u + 12345u;
        if (!(v[i] = malloc(8 + (s >> 8) % 505)))
            return fail("malloc");
        *(char *)v[i] = 1;
    }
    for (int i = 0; i < FLOW_OBJECTS; i++)
        free(v[i]);
    if (stat("bytes_clients", &held) != 0)
        return fail("tcm_stat(bytes_clients)");
    printf("%d objects of 8-512 B freed: %" PRIu64 " KiB cached\n", FLOW_OBJECTS, held >> 10);
    return held >> 10 < FLOW_CACHED_MAX_KB ? 0 : fail("the bins kept what a one-way flow of frees brought");
}

/* SWEEP_ROUNDS rounds of SWEEP_OBJECTS objects of 64 B allocated and then
 * freed: 128 KiB of a class, twice a private heap's capped room. The first
 * rounds refill and overflow through the heap; once the class is seen to
 * sweep its room grows, and the last SWEEP_ROUNDS / 2 rounds ask the heap
 * for nothing more (the seed's 64 B x 2048 case: no fixed threshold). */
#define SWEEP_ROUNDS 200
#define SWEEP_OBJECTS 2048
#define SWEEP_REQUESTS_MAX 8

static int sweep_case(void)
{
    stat_fn_t stat = stat_fn();
    static void *v[SWEEP_OBJECTS];
    uint64_t before = 0, after = 0;
    if (!stat)
        return fail("no tcm_stat: not under libtcm-malloc.so");
    for (int r = 0; r < SWEEP_ROUNDS; r++) {
        if (r == SWEEP_ROUNDS / 2 && stat("requests", &before) != 0)
            return fail("tcm_stat(requests)");
        for (int i = 0; i < SWEEP_OBJECTS; i++)
            *(char *)(v[i] = malloc(64)) = 1;
        for (int i = 0; i < SWEEP_OBJECTS; i++)
            free(v[i]);
    }
    if (stat("requests", &after) != 0)
        return fail("tcm_stat(requests)");
    printf("%d rounds of %d objects of 64 B: %" PRIu64 " requests in the last %d\n", SWEEP_ROUNDS, SWEEP_OBJECTS,
           after - before, SWEEP_ROUNDS / 2);
    return after - before <= SWEEP_REQUESTS_MAX ? 0 : fail("a loop larger than a bin's room goes on refilling");
}

/* THREAD_COUNT threads, alive together, each having used two objects of
 * each of ~40 sizes up to 4 KiB: what each costs the process, its objects
 * (~100 KiB) and stack included. Each class's bin in its own array took a
 * page of the thread's cache, two before c70bc3a (300-340 KiB a thread, 390-410
 * before); a bin now starts in a few entries of a page the classes share
 * (client/tcache.c, bin_backed: 180-210 KiB). */
#define THREAD_COUNT 16
#define THREAD_MAX_KB 256

static pthread_barrier_t threads_used, threads_measured;

static void *thread_body(void *arg)
{
    void *keep[128];
    int n = 0;
    for (size_t size = 32; size <= 4096 && n + 2 <= 128; size += size / 8 > 16 ? size / 8 : 16)
        for (int k = 0; k < 2; k++) {
            keep[n] = malloc(size);
            memset(keep[n++], 0x5a, size);
        }
    for (int i = 0; i < n; i++)
        free(keep[i]);
    pthread_barrier_wait(&threads_used);
    pthread_barrier_wait(&threads_measured);
    return arg;
}

static int threads_case(void)
{
    if (huge_pages_always())
        return not_measured();
    pthread_t t[THREAD_COUNT];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10); /* what a stack costs is not the allocator's */
    pthread_barrier_init(&threads_used, NULL, THREAD_COUNT + 1);
    pthread_barrier_init(&threads_measured, NULL, THREAD_COUNT + 1);
    free(malloc(16)); /* the heap made, the main thread's cache too */
    long before = tt_rss_kb(0);
    for (int i = 0; i < THREAD_COUNT; i++)
        if (pthread_create(&t[i], &attr, thread_body, NULL) != 0)
            return fail("pthread_create");
    pthread_barrier_wait(&threads_used);
    long each = (tt_rss_kb(0) - before) / THREAD_COUNT;
    pthread_barrier_wait(&threads_measured);
    for (int i = 0; i < THREAD_COUNT; i++)
        pthread_join(t[i], NULL);
    printf("%d threads that used ~40 sizes each: %ld KiB more resident a thread\n", THREAD_COUNT, each);
    return before >= 0 && each < THREAD_MAX_KB ? 0 : fail("a thread's cache costs a page a class it used");
}

/* calloc of a page run: one of pages never used or given back since
 * (their zeroes are the kernel's) is not written, as with the system
 * malloc's fresh mappings; one reused from the process's own frees is. */
#define CALLOC_BYTES (64u << 20)
#define CALLOC_TOUCH_MAX_KB 4096

static bool all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

static int calloc_case(void)
{
    long before = tt_rss_kb(0);
    unsigned char *p = calloc(1, CALLOC_BYTES);
    long touched = tt_rss_kb(0) - before;
    if (!p)
        return fail("calloc");
    if (touched > CALLOC_TOUCH_MAX_KB) {
        fprintf(stderr, "tcm_preload_private: a calloc of %u MiB of fresh pages mapped %ld KiB\n",
                CALLOC_BYTES >> 20, touched);
        return 1;
    }
    /* written sparsely (read only there: a read of the rest would map the
     * zero page, which counts as resident), freed, asked for again: given
     * back rather than cleared */
    for (size_t o = 0; o < CALLOC_BYTES; o += 64 * 4096) {
        if (p[o + 100])
            return fail("a fresh calloc is not zero");
        p[o + 100] = 0xa5;
    }
    free(p);
    before = tt_rss_kb(0);
    if (!(p = calloc(1, CALLOC_BYTES)))
        return fail("calloc");
    long sparse = tt_rss_kb(0) - before;
    if (sparse > CALLOC_TOUCH_MAX_KB) {
        fprintf(stderr, "tcm_preload_private: a calloc of pages freed sparsely written mapped %ld KiB\n", sparse);
        return 1;
    }
    if (!all_zero(p, CALLOC_BYTES))
        return fail("a calloc of pages freed sparsely written is not zero");
    for (int i = 0; i < 4; i++) { /* written, freed, asked for again: cleared */
        memset(p, 0xa5, CALLOC_BYTES);
        free(p);
        if (!(p = calloc(CALLOC_BYTES / 4096, 4096)) || !all_zero(p, CALLOC_BYTES))
            return fail("a calloc of pages freed written is not zero");
    }
    free(p);
    printf("a calloc of %u MiB mapped %ld KiB of fresh pages, %ld KiB of pages freed sparsely written\n",
           CALLOC_BYTES >> 20, touched, sparse);
    return 0;
}

/* A block of 2 MiB mapped whole when handed out was 2 MiB more resident;
 * the page written, the span records and the heap's growth are a few (not
 * measured where huge pages are always on). */
#define START_TOUCH_MAX_KB 256

static void *volatile kept;

static int start_case(void)
{
    void *small[8];
    for (int i = 0; i < 8; i++)
        small[i] = malloc(16u << i);
    if (tt_status_value(0, "Threads") != 1)
        return fail("a program of a few small blocks has a thread it did not make");
    long before = resident_kb(small[0]);
    char *block = malloc(2u << 20);
    block[4096] = 1;
    long grew = resident_kb(small[0]) - before;
    int alone = tt_status_value(0, "Threads");
    char *big = malloc(8u << 20); /* the heap's top past BG_AFTER_BYTES: the background thread starts */
    big[0] = 1;
    int with_big = tt_status_value(0, "Threads");
    kept = big; /* (else the compiler may drop the mallocs of blocks never read) */
    kept = block;
    printf("a 2 MiB block written at one byte: %ld KiB more resident; threads %d, then %d with 10 MiB\n", grew,
           alone, with_big);
    free(big);
    free(block);
    for (int i = 0; i < 8; i++)
        free(small[i]);
    if (before < 0 || (grew >= START_TOUCH_MAX_KB && !huge_pages_always()))
        return fail("a block was mapped whole when handed out");
    return alone == 1 && with_big == 2 ? 0 : fail("the background thread did not start with the heap's growth alone");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "start") == 0)
        return start_case();
    if (argc == 2 && strcmp(argv[1], "calloc") == 0)
        return calloc_case();
    if (argc == 2 && strcmp(argv[1], "threads") == 0)
        return threads_case();
    if (argc == 2 && strcmp(argv[1], "flow") == 0)
        return flow_case();
    if (argc == 2 && strcmp(argv[1], "sweep") == 0)
        return sweep_case();
    if (argc == 2 && strcmp(argv[1], "sparse") == 0)
        return sparse_case();
    if (argc == 2 && strcmp(argv[1], "grow") == 0)
        return grow_case();
    if (argc == 2 && strcmp(argv[1], "where") == 0) {
        char *small = malloc(100), *large = malloc(4 << 20);
        memset(large, 0x5a, 4 << 20);
        printf("%p %p\n", (void *)small, (void *)large);
        free(small);
        free(large);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "fork") == 0)
        return fork_case();
    fprintf(stderr, "usage: tcm_preload_private where|fork|sparse|grow|flow|sweep|threads|calloc|start\n");
    return 2;
}
