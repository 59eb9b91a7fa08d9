/* tcm_test_helper — exec'd by the integration tests to act as an unrelated
 * process on the same heap.
 *   produce ROOT   allocate objects of many sizes, fill them with a pattern
 *                  and publish a table of (offset, size) through ROOT
 *   consume ROOT   check every object of ROOT's table and free them all
 *   disjoint ROOT1 ROOT2   check no object of one table overlaps the other
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"

typedef struct entry {
    uint64_t off;
    uint64_t size;
} entry_t;

typedef struct table {
    uint64_t n;
    uint64_t producer;
    entry_t e[];
} table_t;

static unsigned char pattern(uint64_t i, uint64_t k)
{
    return (unsigned char)(i * 131 + k * 7 + 1);
}

static uint64_t sizes[4096];

static uint64_t make_sizes(void)
{
    uint64_t n = 0;
    /* every class boundary and one past it, small odd sizes, page runs */
    for (size_t s = 1; s <= 256 * 1024 && n < 4000; s = s < 128 ? s + 1 : s + s / 16) {
        sizes[n++] = s;
        sizes[n++] = s + 1;
    }
    uint64_t big[] = {256 * 1024 + 1, 300000, 1 << 20, 5 << 20, 8192, 8193};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++)
        sizes[n++] = big[i];
    return n;
}

static int produce(const char *root)
{
    CHECK_EQ(tcm_init(NULL), 0);
    uint64_t n = make_sizes();
    table_t *t = tcm_malloc(sizeof *t + n * sizeof(entry_t));
    CHECK(t != NULL);
    t->n = n;
    t->producer = (uint64_t)getpid();
    for (uint64_t i = 0; i < n; i++) {
        unsigned char *p = tcm_malloc(sizes[i]);
        CHECK(p != NULL);
        for (uint64_t k = 0; k < sizes[i]; k++)
            p[k] = pattern(i, k);
        t->e[i].off = tcm_to_offset(p);
        t->e[i].size = sizes[i];
    }
    CHECK_EQ(tcm_root_set(root, t), 0);
    printf("produced %llu objects\n", (unsigned long long)n);
    return 0;
}

static int consume(const char *root)
{
    table_t *t = tcm_root_get(root);
    CHECK(t != NULL);
    CHECK_NE(t->producer, (uint64_t)getpid());
    for (uint64_t i = 0; i < t->n; i++) {
        unsigned char *p = tcm_from_offset(t->e[i].off);
        CHECK(p != NULL);
        CHECK_GE(tcm_usable_size(p), t->e[i].size);
        for (uint64_t k = 0; k < t->e[i].size; k++)
            if (p[k] != pattern(i, k)) {
                fprintf(stderr, "object %llu (size %llu) corrupt at byte %llu\n", (unsigned long long)i,
                        (unsigned long long)t->e[i].size, (unsigned long long)k);
                return 1;
            }
        tcm_free(p);
    }
    printf("consumed %llu objects from pid %llu\n", (unsigned long long)t->n,
           (unsigned long long)t->producer);
    CHECK_EQ(tcm_root_set(root, NULL), 0);
    tcm_free(t);
    tcm_shutdown();
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const entry_t *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int disjoint(const char *r1, const char *r2)
{
    table_t *a = tcm_root_get(r1), *b = tcm_root_get(r2);
    CHECK(a && b);
    uint64_t n = a->n + b->n;
    entry_t *all = malloc(n * sizeof *all);
    memcpy(all, a->e, a->n * sizeof(entry_t));
    memcpy(all + a->n, b->e, b->n * sizeof(entry_t));
    qsort(all, n, sizeof *all, cmp_entry);
    for (uint64_t i = 1; i < n; i++)
        if (all[i - 1].off + all[i - 1].size > all[i].off) {
            fprintf(stderr, "objects overlap: [%llx,+%llu) and [%llx,+%llu)\n",
                    (unsigned long long)all[i - 1].off, (unsigned long long)all[i - 1].size,
                    (unsigned long long)all[i].off, (unsigned long long)all[i].size);
            return 1;
        }
    free(all);
    return 0;
}

/* Allocate until the heap (or /dev/shm) is full: NULL with ENOMEM, never a
 * signal; then free everything and allocate again. */
static int fill(void)
{
    CHECK_EQ(tcm_init(NULL), 0);
    enum { MAX = 1 << 20 };
    void **ps = calloc(MAX, sizeof *ps);
    int n = 0;
    errno = 0;
    while (n < MAX && (ps[n] = tcm_malloc(n % 2 ? 3000 : 300000)) != NULL) {
        memset(ps[n], 1, n % 2 ? 3000 : 300000);
        n++;
    }
    CHECK_EQ(errno, ENOMEM);
    CHECK_GT(n, 10);
    printf("filled: %d objects before ENOMEM\n", n);
    for (int i = 0; i < n; i++)
        tcm_free(ps[i]);
    void *p = tcm_malloc(300000);
    CHECK(p != NULL);
    memset(p, 2, 300000);
    tcm_free(p);
    tcm_shutdown();
    free(ps);
    return 0;
}

/* A client driven line by line from stdin, for the control-plane test:
 *   alloc N SIZE | free | churn N SIZE | poke | root NAME | shutdown | exit
 * Each command answers one line: ok, or enomem K (K allocated first). */
static int serve(void)
{
    static void *held[1 << 20];
    size_t n = 0;
    char line[256];
    CHECK_EQ(tcm_init(NULL), 0);
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        unsigned long count = 0, size = 0;
        char name[64];
        if (sscanf(line, "alloc %lu %lu", &count, &size) == 2) {
            unsigned long i = 0;
            for (; i < count && n < (1u << 20); i++) {
                if (!(held[n] = tcm_malloc(size)))
                    break;
                memset(held[n++], 1, size < 64 ? size : 64);
            }
            if (i < count)
                printf("enomem %lu\n", i);
            else
                printf("ok\n");
        } else if (strncmp(line, "free", 4) == 0) {
            while (n)
                tcm_free(held[--n]);
            printf("ok\n");
        } else if (sscanf(line, "churn %lu %lu", &count, &size) == 2) {
            void **tmp = malloc(count * sizeof *tmp);
            for (unsigned long i = 0; i < count; i++)
                tmp[i] = tcm_malloc(size);
            for (unsigned long i = 0; i < count; i++)
                tcm_free(tmp[i]);
            free(tmp);
            printf("ok\n");
        } else if (strncmp(line, "poke", 4) == 0) {
            for (size_t s = 8; s <= 65536; s *= 2) /* misses in fresh classes: slow paths */
                tcm_free(tcm_malloc(s + 3));
            printf("ok\n");
        } else if (sscanf(line, "root %63s", name) == 1) {
            printf("%s\n", n && tcm_root_set(name, held[0]) == 0 ? "ok" : "fail");
        } else if (strncmp(line, "shutdown", 8) == 0) {
            tcm_shutdown();
            printf("ok\n");
        } else if (strncmp(line, "exit", 4) == 0) {
            printf("ok\n");
            fflush(stdout);
            return 0;
        } else {
            printf("unknown\n");
        }
        fflush(stdout);
    }
    return 0;
}

/* No daemon on $TCM_SOCKET: clear errors, no crash. */
/* A process that never attached, facing no tcmd (want: the -errno of its
 * tcm_init: -ENOENT no socket file, -ECONNREFUSED a stale one, -ETIMEDOUT
 * a listener that never answers): every call fails at once. */
static int nodaemon(int want)
{
    CHECK_EQ(tcm_init(NULL), want);
    errno = 0;
    CHECK(tcm_malloc(10) == NULL);
    CHECK_EQ(errno, ENOMEM);
    CHECK(tcm_malloc(1 << 20) == NULL);
    CHECK(tcm_root_get("x") == NULL);
    tcm_free(NULL);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "nodaemon") == 0)
        return nodaemon(-ENOENT);
    if (argc == 3 && strcmp(argv[1], "nodaemon") == 0)
        return nodaemon(-atoi(argv[2]));
    if (argc == 2 && strcmp(argv[1], "fill") == 0)
        return fill();
    if (argc == 2 && strcmp(argv[1], "serve") == 0)
        return serve();
    if (argc == 3 && strcmp(argv[1], "produce") == 0)
        return produce(argv[2]);
    if (argc == 3 && strcmp(argv[1], "consume") == 0)
        return consume(argv[2]);
    if (argc == 4 && strcmp(argv[1], "disjoint") == 0)
        return disjoint(argv[2], argv[3]);
    fprintf(stderr, "usage: tcm_test_helper produce|consume ROOT | disjoint ROOT1 ROOT2\n");
    return 2;
}
