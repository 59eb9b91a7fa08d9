/* client.c — a process of the upgrade test (tests/upgrade_test.sh), built
 * from tcm.h alone against each release's installed package, so the same
 * source is a libtcm 0.2.0 client and a current one.
 *
 *   client SOCKET NAME DIR   hold a table of objects under root
 *                            "upgrade.NAME" and rewrite it until DIR/stop
 *                            exists: every round frees and replaces some
 *                            objects, checks each one it frees, allocates
 *                            and frees a page run (a request tcmd serves)
 *                            and sets a root; DIR/NAME.rounds says how far
 *                            it got. At the stop it checks every object
 *                            and leaves the table held under its root.
 *   client SOCKET --check NAME...   check and free the tables the others
 *                            left, and their roots.
 * Exit 0; 2 when an allocation failed, 3 when an object is not what its
 * writer left (lost, or handed out twice). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tcm.h>

#define OBJECTS 2000
#define PER_ROUND 200

typedef struct {
    unsigned char *p;
    uint32_t size, gen;
} entry_t;

typedef struct {
    uint64_t seed;
    entry_t e[OBJECTS];
} table_t;

static unsigned char byte_at(const table_t *t, uint32_t i, uint32_t k)
{
    return (unsigned char)(t->seed * 131 + i * 7 + t->e[i].gen * 13 + k);
}

static void fill(table_t *t, uint32_t i)
{
    for (uint32_t k = 0; k < t->e[i].size; k++)
        t->e[i].p[k] = byte_at(t, i, k);
}

static void check(const table_t *t, uint32_t i, const char *who)
{
    for (uint32_t k = 0; k < t->e[i].size; k++)
        if (t->e[i].p[k] != byte_at(t, i, k)) {
            fprintf(stderr, "%s: object %u (%u bytes, generation %u) differs at byte %u\n", who, i, t->e[i].size,
                    t->e[i].gen, k);
            exit(3);
        }
}

static void *must_alloc(size_t size, const char *who)
{
    void *p = tcm_malloc(size);
    if (!p) {
        fprintf(stderr, "%s: tcm_malloc(%zu) failed\n", who, size);
        exit(2);
    }
    return p;
}

static void put(table_t *t, uint32_t i, uint64_t *rng, const char *who)
{
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    t->e[i].size = 16 + (uint32_t)(*rng >> 33) % 2000;
    t->e[i].gen++;
    t->e[i].p = must_alloc(t->e[i].size, who);
    fill(t, i);
}

static void progress(const char *dir, const char *name, unsigned long rounds)
{
    char path[512], tmp[520];
    snprintf(path, sizeof path, "%s/%s.rounds", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f) {
        fprintf(f, "%lu\n", rounds);
        fclose(f);
        rename(tmp, path);
    }
}

static int writer(const char *name, const char *dir)
{
    char root[64], stop[512];
    snprintf(root, sizeof root, "upgrade.%s", name);
    snprintf(stop, sizeof stop, "%s/stop", dir);
    table_t *t = must_alloc(sizeof *t, name);
    memset(t, 0, sizeof *t);
    uint64_t rng = (uint64_t)getpid();
    for (const char *c = name; *c; c++)
        t->seed = t->seed * 31 + (unsigned char)*c;
    for (uint32_t i = 0; i < OBJECTS; i++)
        put(t, i, &rng, name);
    if (tcm_root_set(root, t) != 0) {
        fprintf(stderr, "%s: tcm_root_set failed\n", name);
        return 2;
    }
    unsigned long rounds = 0;
    while (access(stop, F_OK) != 0) {
        for (int k = 0; k < PER_ROUND; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t i = (uint32_t)(rng >> 33) % OBJECTS;
            check(t, i, name);
            tcm_free(t->e[i].p);
            put(t, i, &rng, name);
        }
        size_t big = 64 * 1024 + (rng >> 40) % (256 * 1024);
        unsigned char *run = must_alloc(big, name);
        run[0] = run[big - 1] = 1;
        tcm_free(run);
        if (tcm_root_set(root, t) != 0) { /* a request every round, answered by whichever tcmd runs */
            fprintf(stderr, "%s: tcm_root_set failed in round %lu\n", name, rounds);
            return 2;
        }
        if (++rounds % 20 == 0)
            progress(dir, name, rounds);
        usleep(1000);
    }
    for (uint32_t i = 0; i < OBJECTS; i++)
        check(t, i, name);
    progress(dir, name, rounds);
    printf("%s: %lu rounds, every object checked\n", name, rounds);
    return 0;
}

static int checker(char **names, int n)
{
    for (int j = 0; j < n; j++) {
        char root[64];
        snprintf(root, sizeof root, "upgrade.%s", names[j]);
        table_t *t = tcm_root_get(root);
        if (!t) {
            fprintf(stderr, "check: no root %s\n", root);
            return 3;
        }
        for (uint32_t i = 0; i < OBJECTS; i++) {
            check(t, i, root);
            tcm_free(t->e[i].p);
        }
        tcm_free(t);
        if (tcm_root_set(root, NULL) != 0)
            return 2;
        printf("check: %s's %d objects as its writer left them, freed\n", names[j], OBJECTS);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: client SOCKET NAME DIR | client SOCKET --check NAME...\n");
        return 1;
    }
    int rc = tcm_init(argv[1]);
    if (rc != 0) {
        fprintf(stderr, "tcm_init(%s): %s\n", argv[1], strerror(-rc));
        return 2;
    }
    rc = strcmp(argv[2], "--check") == 0 ? checker(argv + 3, argc - 3) : writer(argv[2], argv[3]);
    tcm_shutdown();
    return rc;
}
