/* The public API against a real daemon: malloc-like semantics, realloc,
 * aligned allocation, usable size, offsets and roots. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "tcm.h"
#include "rss.h"
#include "testutil.h"

static tcm_test_daemon_t d;

static void test_basics(void)
{
    tcm_free(NULL); /* no-op, even before attaching */
    for (size_t s = 0; s <= 300000; s = s < 64 ? s + 1 : s * 5 / 4) {
        unsigned char *p = tcm_malloc(s);
        CHECK(p != NULL);
        CHECK_EQ((uintptr_t)p % 16, 0);
        CHECK_GE(tcm_usable_size(p), s);
        memset(p, 0xab, s);
        tcm_free(p);
    }
    int *z = tcm_calloc(1000, sizeof(int));
    CHECK(z != NULL);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(z[i], 0);
    tcm_free(z);
    errno = 0;
    CHECK(tcm_calloc(SIZE_MAX / 2, 3) == NULL);
    CHECK_EQ(errno, ENOMEM);
    errno = 0;
    CHECK(tcm_malloc(SIZE_MAX - 100) == NULL);
    CHECK_EQ(errno, ENOMEM);
    /* attached: the same socket (or none named) is no change, another one
     * is refused, and the first stays served */
    CHECK_EQ(tcm_init(d.socket), 0);
    CHECK_EQ(tcm_init(NULL), 0);
    CHECK_EQ(tcm_init("/nonexistent/other/tcmd.sock"), -EBUSY);
    void *q = tcm_malloc(100);
    CHECK(q != NULL);
    tcm_free(q);
}

static void test_calloc_zeroes_reused(void)
{
    /* dirty an object, free it, calloc the same class: must be zero */
    for (int round = 0; round < 50; round++) {
        unsigned char *p = tcm_malloc(200);
        memset(p, 0xff, 200);
        tcm_free(p);
        unsigned char *q = tcm_calloc(1, 200);
        for (int i = 0; i < 200; i++)
            CHECK_EQ(q[i], 0);
        tcm_free(q);
    }
}

/* calloc of a page run: one tcmd says reads zero (fresh, or punched since
 * it was last used) is not written, so the process maps none of it until
 * it uses it; one that comes back written (the run cache, tcmd's backed
 * free runs) is cleared. */
static bool all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

static void test_calloc_large(void)
{
    const size_t n = 32u << 20;
    char out[256];
    CHECK_EQ(tt_tcmctl(&d, "release", out, sizeof out), 0); /* every free page punched: any run reads zero */
    long before = tt_rss_kb(0);
    unsigned char *p = tcm_calloc(1, n);
    CHECK(p != NULL);
    CHECK_LT(tt_rss_kb(0) - before, 4096); /* a memset had mapped 32 MiB */
    CHECK(all_zero(p, n));
    memset(p, 0xa5, n);
    tcm_free(p); /* into the run cache */
    unsigned char *q = tcm_calloc(n / 4096, 4096);
    CHECK(q == p);
    CHECK(all_zero(q, n));
    memset(q, 0xa5, n);
    CHECK_EQ(tt_tcmctl(&d, "config set run_cache 0", out, sizeof out), 0);
    uint64_t freed = tt_stat(&d, "requests_free_pages");
    tcm_free(q); /* to tcmd: a backed free run, written */
    CHECK_EQ(tt_wait_stat(&d, "requests_free_pages", freed + 1, 5000), freed + 1);
    q = tcm_calloc(1, n); /* a backed run (first fit: this one, or one the run cache gave back) */
    CHECK(q != NULL);
    CHECK(all_zero(q, n));
    memset(q, 0xa5, n);
    tcm_free(q);
    CHECK_EQ(tt_wait_stat(&d, "requests_free_pages", freed + 2, 5000), freed + 2);
    CHECK_EQ(tt_tcmctl(&d, "release", out, sizeof out), 0); /* punched: zero again, and unmapped here */
    before = tt_rss_kb(0);
    q = tcm_calloc(1, n);
    CHECK(q != NULL);
    CHECK_LT(tt_rss_kb(0) - before, 4096);
    CHECK(all_zero(q, n));
    tcm_free(q);
    CHECK_EQ(tt_tcmctl(&d, "config set run_cache 128M", out, sizeof out), 0);
}

static void test_realloc(void)
{
    char *p = tcm_realloc(NULL, 10);
    CHECK(p != NULL);
    strcpy(p, "abcdefghi");
    for (size_t s = 20; s < 2000000; s *= 3) {
        p = tcm_realloc(p, s);
        CHECK(p != NULL);
        CHECK_EQ(strcmp(p, "abcdefghi"), 0);
        CHECK_GE(tcm_usable_size(p), s);
    }
    p = tcm_realloc(p, 5);
    CHECK_EQ(memcmp(p, "abcde", 5), 0);
    CHECK_LT(tcm_usable_size(p), 64);
    CHECK(tcm_realloc(p, 0) == NULL); /* frees, like glibc */

    /* a small block stays in its class until it needs less than half of it */
    char *s = tcm_realloc(NULL, 100);
    CHECK(s != NULL);
    size_t cap = tcm_usable_size(s);
    memset(s, 'x', cap);
    CHECK(tcm_realloc(s, cap) == s);
    CHECK(tcm_realloc(s, cap / 2 + 1) == s);
    char *t = tcm_realloc(s, cap / 2);
    CHECK(t != s);
    CHECK_LT(tcm_usable_size(t), cap);
    for (size_t i = 0; i < cap / 2; i++)
        CHECK_EQ(t[i], 'x');
    tcm_free(t);
}

static void test_aligned(void)
{
    for (size_t a = 1; a <= (1u << 22); a <<= 1) {
        size_t sizes[] = {1, 17, a, 3 * a + 1, 300000};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            void *p = tcm_aligned_alloc(a, sizes[i]);
            CHECK(p != NULL);
            CHECK_EQ((uintptr_t)p % a, 0);
            CHECK_GE(tcm_usable_size(p), sizes[i]);
            memset(p, 1, sizes[i]);
            tcm_free_sized(p, sizes[i]);
        }
    }
    errno = 0;
    CHECK(tcm_aligned_alloc(24, 100) == NULL);
    CHECK_EQ(errno, EINVAL);
}

static void test_offsets_and_roots(void)
{
    char *p = tcm_malloc(100);
    uint64_t off = tcm_to_offset(p);
    CHECK_NE(off, 0);
    CHECK_NE(off, UINT64_MAX);
    CHECK(tcm_from_offset(off) == p);
    CHECK_EQ(tcm_to_offset(NULL), 0);
    CHECK(tcm_from_offset(0) == NULL);
    int local;
    CHECK_EQ(tcm_to_offset(&local), UINT64_MAX);
    CHECK(tcm_from_offset(UINT64_MAX / 2) == NULL);

    CHECK(tcm_root_get("api.root") == NULL);
    CHECK_EQ(tcm_root_set("api.root", p), 0);
    CHECK(tcm_root_get("api.root") == p);
    char *q = tcm_malloc(10);
    CHECK_EQ(tcm_root_set("api.root", q), 0); /* replace */
    CHECK(tcm_root_get("api.root") == q);
    CHECK_EQ(tcm_root_set("api.root", NULL), 0); /* remove */
    CHECK(tcm_root_get("api.root") == NULL);
    CHECK_EQ(tcm_root_set("", p), -EINVAL);
    char longname[100];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    CHECK_EQ(tcm_root_set(longname, p), -EINVAL);
    CHECK_EQ(tcm_root_set("api.bad", &local), -EINVAL);
    /* create only where the name is free; replace only what it holds */
    CHECK_EQ(tcm_root_create("api.once", p), 0);
    CHECK_EQ(tcm_root_create("api.once", q), -EEXIST);
    CHECK(tcm_root_get("api.once") == p);
    CHECK_EQ(tcm_root_replace("api.once", q, q), -EAGAIN); /* it holds p, not q */
    CHECK_EQ(tcm_root_replace("api.once", p, q), 0);
    CHECK(tcm_root_get("api.once") == q);
    CHECK_EQ(tcm_root_replace("api.once", q, NULL), 0); /* removed */
    CHECK(tcm_root_get("api.once") == NULL);
    CHECK_EQ(tcm_root_replace("api.once", NULL, p), 0); /* absent, as expected: created */
    CHECK_EQ(tcm_root_replace("api.once", NULL, q), -EAGAIN);
    CHECK_EQ(tcm_root_set("api.once", NULL), 0);
    CHECK_EQ(tcm_root_create("api.once", NULL), -EINVAL);
    /* one user's share is bounded (roots_per_uid, 256 by default): fill
     * it, get EDQUOT, nothing else breaks; names found past deleted ones */
    char name[32];
    int i, err = 0;
    for (i = 0; i < 1000 && !err; i++) {
        snprintf(name, sizeof name, "fill.%d", i);
        err = tcm_root_set(name, p);
    }
    CHECK_EQ(err, -EDQUOT);
    CHECK_EQ(i - 1, 256);
    CHECK(tcm_root_get("fill.0") == p);
    for (int j = 0; j < i; j += 2) {
        snprintf(name, sizeof name, "fill.%d", j);
        tcm_root_set(name, NULL);
    }
    for (int j = 1; j < i - 1; j += 2) {
        snprintf(name, sizeof name, "fill.%d", j);
        CHECK(tcm_root_get(name) == p);
        tcm_root_set(name, NULL);
    }
    CHECK_EQ(tcm_root_set("fill.again", p), 0); /* the share came back */
    CHECK_EQ(tcm_root_set("fill.again", NULL), 0);
    tcm_free(p);
    tcm_free(q);
}

static void test_no_overlap(void)
{
    enum { N = 20000 };
    static char *ps[N];
    static size_t sz[N];
    for (int i = 0; i < N; i++) {
        sz[i] = 1 + (size_t)(i * 7919) % (i % 100 == 0 ? 400000 : 3000);
        ps[i] = tcm_malloc(sz[i]);
        CHECK(ps[i] != NULL);
        memset(ps[i], (char)i, sz[i]);
    }
    for (int i = 0; i < N; i++)
        for (size_t k = 0; k < sz[i]; k += 61)
            CHECK_EQ(ps[i][k], (char)i);
    for (int i = 0; i < N; i++)
        tcm_free(ps[i]);
}


/* A large allocation reuses a run the process freed (up to 1/2 larger)
 * without asking tcmd; other sizes still come from tcmd. */
static void test_page_run_cache(void)
{
    void *p = tcm_malloc(512 << 10);
    CHECK(p != NULL);
    tcm_free(p);
    uint64_t asked = tt_stat(&d, "requests_alloc_pages"), freed = tt_stat(&d, "requests_free_pages");
    for (int i = 0; i < 1000; i++) {
        char *q = tcm_malloc((512 << 10) - (size_t)(i % 7) * 1000);
        CHECK(q == p);
        q[0] = q[(512 << 10) - 8000] = (char)i;
        CHECK_GE(tcm_usable_size(q), (512u << 10) - 6000);
        tcm_free(q);
    }
    CHECK_EQ(tt_stat(&d, "requests_alloc_pages"), asked);
    CHECK_EQ(tt_stat(&d, "requests_free_pages"), freed);
    void *big = tcm_malloc((7 << 20) + 4096); /* a size nothing cached has */
    CHECK(big != NULL && big != p);
    CHECK_EQ(tt_stat(&d, "requests_alloc_pages"), asked + 1);
    tcm_free(big);
}

/* The page-run cache holds at most run_cache bytes: a run freed beyond it
 * goes to tcmd at once, and a smaller run_cache takes back what is over
 * it without any allocation (the background thread). A cached run serves
 * a request it exceeds by at most 1/2. */
static void test_run_cache_bound(void)
{
    char out[256];
    CHECK_EQ(tt_tcmctl(&d, "config set run_cache 1M", out, sizeof out), 0);
    void *p = tcm_malloc(768 << 10), *q = tcm_malloc(768 << 10);
    CHECK(p && q);
    uint64_t freed = tt_stat(&d, "requests_free_pages");
    tcm_free(p);
    CHECK_EQ(tt_stat(&d, "requests_free_pages"), freed);
    tcm_free(q);
    CHECK_EQ(tt_wait_stat(&d, "requests_free_pages", freed + 1, 5000), freed + 1); /* posted, not waited for */
    uint64_t asked = tt_stat(&d, "requests_alloc_pages");
    void *r = tcm_malloc(64 << 13); /* 96 pages cached: 32 more than asked */
    CHECK(r == p);
    tcm_free(r);
    void *s = tcm_malloc(63 << 13);
    CHECK(s != p);
    CHECK_EQ(tt_stat(&d, "requests_alloc_pages"), asked + 1);
    tcm_free(s); /* over the bound: to tcmd */
    CHECK_EQ(tt_tcmctl(&d, "config set run_cache 0", out, sizeof out), 0);
    CHECK_EQ(tt_wait_stat(&d, "requests_free_pages", freed + 3, 5000), freed + 3);
    CHECK_EQ(tt_tcmctl(&d, "config set run_cache 128M", out, sizeof out), 0);
}

/* cache-scratch: a thread whose first touch of a small class is freeing
 * another thread's object does not get that object (and its cache line,
 * which the other thread may still write) back from its next malloc. */
static void *free_then_malloc(void *handed)
{
    tcm_free(handed);
    void *mine = tcm_malloc(24);
    CHECK(mine != NULL && mine != handed);
    tcm_free(mine);
    return NULL;
}

static void test_first_free_keeps_lines_apart(void)
{
    void *handed = tcm_malloc(24);
    CHECK(handed != NULL);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, free_then_malloc, handed), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
}

/* A miss takes an object of a class at most a quarter larger from the
 * thread's own bins, before asking tcmd, and only one whose objects are at
 * least as aligned (tcm_aligned_alloc picks a class by its alignment).
 * Each case runs in a process of its own, so every bin starts empty. */
static void test_miss_takes_larger_class(void)
{
    void *q = tcm_malloc(192);
    CHECK(q != NULL);
    tcm_free(q); /* on top of the 192 B bin; the 160 B bin was never used */
    void *p = tcm_malloc(160);
    CHECK(p == q);
    CHECK_EQ(tcm_usable_size(p), 192);
    tcm_free(p);

    /* not past a quarter: 288 B is more than 5/4 of 224 */
    void *big = tcm_malloc(288);
    tcm_free(big);
    void *r = tcm_malloc(224);
    CHECK(r != big);
    CHECK_EQ(tcm_usable_size(r), 224);
    tcm_free(r);

    /* 176 B objects are only 16-byte aligned, 192 B ones 64: a 32-aligned
     * 160 B request passes a 176 B object by and takes a 192 B one */
    void *objs[16], *odd = NULL;
    for (int i = 0; i < 16; i++) {
        objs[i] = tcm_malloc(176);
        CHECK(objs[i] != NULL);
        if (!odd && (uintptr_t)objs[i] % 32)
            odd = objs[i];
    }
    CHECK(odd != NULL);
    for (int i = 0; i < 16; i++)
        if (objs[i] != odd)
            tcm_free(objs[i]);
    tcm_free(odd); /* on top of the 176 B bin */
    void *a = tcm_aligned_alloc(32, 160);
    CHECK(a != NULL && a != odd);
    CHECK_EQ((uintptr_t)a % 32, 0);
    CHECK_EQ(tcm_usable_size(a), 192);
    tcm_free(a);
    void *plain = tcm_malloc(144); /* a class only 16-byte aligned itself takes it */
    CHECK(plain == odd);
    tcm_free(plain);
}

/* A class of one-object spans that is not busy keeps nothing in the
 * thread's bin: the span goes back to tcmd, whose page heap serves any
 * class from it. One used in a tight loop caches as any other. */
static void test_quiet_span_class(void)
{
    const size_t big = 200 << 10; /* one object a span */
    void *p = tcm_malloc(big);
    CHECK(p != NULL);
    uint64_t cached = tt_stat(&d, "bytes_client_caches");
    struct timespec pause = {0, 20 * 1000000};
    nanosleep(&pause, NULL); /* quiet: nothing of the class for 20 ms */
    tcm_free(p);
    CHECK_EQ(tt_stat(&d, "bytes_client_caches"), cached);
    for (int i = 0; i < 100; i++) {
        void *q = tcm_malloc(big);
        CHECK(q != NULL);
        tcm_free(q);
    }
    CHECK_GE(tt_stat(&d, "bytes_client_caches"), cached + big);
}

/* tcm_stat serves every figure of tcmctl stats, as fresh as tcmctl's. */
static void test_stat_every_figure(void)
{
    char out[1 << 16];
    CHECK_EQ(tt_tcmctl(&d, "--json stats", out, sizeof out), 0);
    int figures = 0;
    char *hist = strstr(out, "\"service_time\"");
    if (hist)
        *hist = 0; /* (its members are not figures) */
    for (const char *p = out; (p = strstr(p, "\"")) != NULL;) {
        const char *end = strchr(p + 1, '"');
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(end - p - 1), p + 1);
        p = end + 1;
        if (*p != ':' || p[1] < '0' || p[1] > '9') /* (service_time's members are not figures) */
            continue;
        uint64_t v;
        if (tcm_stat(name, &v) != 0) {
            fprintf(stderr, "tcm_stat(\"%s\") failed\n", name);
            abort();
        }
        figures++;
    }
    CHECK_GE(figures, 40);
    uint64_t v;
    CHECK_EQ(tcm_stat("no_such_figure", &v), -ENOENT);
    /* fresh: a committed page run shows in bytes_committed at once */
    uint64_t before, after;
    CHECK_EQ(tcm_stat("bytes_committed", &before), 0);
    char *p = tcm_malloc(32 << 20);
    CHECK(p != NULL);
    memset(p, 1, 32 << 20);
    CHECK_EQ(tcm_stat("bytes_committed", &after), 0);
    CHECK_GE(after, before + (16 << 20));
    CHECK_EQ(tcm_stat("uptime_seconds", &v), 0);
    CHECK_EQ(tcm_stat("fragmentation_ratio", &v), 0); /* thousandths */
    CHECK_GT(v, 0);
    tcm_free(p);
}

int main(void)
{
    /* no heap profile: a sampled page run goes back to tcmd at its free,
     * never to the page-run cache two cases check */
    const char *args[] = {"--profile-sample", "0", NULL};
    tt_daemon_start(&d, args);
    CHECK_EQ(tcm_init(d.socket), 0);
    static const tt_case_t cases[] = {
        {"basics", test_basics},
        {"tcm_stat serves every figure", test_stat_every_figure},
        {"calloc zeroes reused memory", test_calloc_zeroes_reused},
        {"calloc of a page run writes only what may not read zero", test_calloc_large},
        {"realloc", test_realloc},
        {"aligned", test_aligned},
        {"offsets and roots", test_offsets_and_roots},
        {"no overlap", test_no_overlap},
        {"page-run cache", test_page_run_cache},
        {"page-run cache bound", test_run_cache_bound},
        {"first free of a class", test_first_free_keeps_lines_apart},
        {"a miss takes a larger class", test_miss_takes_larger_class},
        {"a quiet class of one-object spans keeps nothing", test_quiet_span_class},
    };
    int failed = tt_run_cases("api", cases, sizeof cases / sizeof cases[0], 60000);
    tcm_shutdown();
    /* every case's process gave back what it allocated, and so did this one */
    CHECK_EQ(tt_wait_stat(&d, "bytes_clients", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "refused"), 0);
    /* and the library re-attaches on next use */
    void *p = tcm_malloc(10);
    CHECK(p != NULL);
    tcm_free(p);
    tcm_shutdown();
    tt_daemon_stop(&d);
    return failed != 0;
}
