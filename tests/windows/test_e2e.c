/* tcm end to end on Windows (under Wine): a real tcmd.exe, processes that
 * attach over its named pipe, objects allocated in one process and freed in
 * another, a shared root, and a client killed with TerminateProcess whose
 * cached objects tcmd takes back, and tcmd killed and started again under
 * a client that goes on. */
#include <windows.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "prim.h"
#include "spawn.h"
#include "tcm.h"

#define OBJECTS 20000

typedef struct {
    uint32_t n;
    void *objs[OBJECTS];
} table_t;

static char socket_path[64];

static size_t size_of(uint32_t i)
{
    return 16 + (i * 37) % 2000 + (i % 100 == 0 ? 300000 : 0); /* small classes and some page runs */
}

static void fill(void *p, size_t n, uint32_t i)
{
    memset(p, (int)(i & 0xff), n);
}

static bool intact(const void *p, size_t n, uint32_t i)
{
    const unsigned char *c = p;
    return c[0] == (i & 0xff) && c[n - 1] == (i & 0xff);
}

static uint64_t stat_of(const char *name)
{
    uint64_t v = 0;
    CHECK_EQ(tcm_stat(name, &v), 0);
    return v;
}

/* t->objs[0..n) allocated and filled; then each checked and freed. */
static void allocate_all(table_t *t, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        t->objs[i] = tcm_malloc(size_of(i));
        CHECK(t->objs[i] != NULL);
        fill(t->objs[i], size_of(i), i);
    }
}

static void check_and_free_all(table_t *t, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        CHECK(intact(t->objs[i], size_of(i), i));
        tcm_free(t->objs[i]);
    }
}

/* tcmd.exe, next to this program, on a socket and heap of our own. */
static HANDLE start_tcmd(void)
{
    char self[MAX_PATH], cmd[2 * MAX_PATH];
    GetModuleFileNameA(NULL, self, sizeof self);
    char *slash = strrchr(self, '\\');
    CHECK(slash != NULL);
    *slash = 0;
    snprintf(cmd, sizeof cmd, "\"%s\\tcmd.exe\" --foreground --socket %s --name e2e%u --heap-size 512M", self,
             socket_path, (unsigned)tcm__pid());
    STARTUPINFOA si = {.cb = sizeof si};
    PROCESS_INFORMATION pi;
    CHECK(CreateProcessA(NULL, cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi));
    CloseHandle(pi.hThread);
    for (int i = 0; i < 400; i++) { /* until it answers */
        tcm_handle_t fd = tcm__connect(socket_path);
        if (fd >= 0) {
            tcm__close(fd);
            return pi.hProcess;
        }
        Sleep(50);
    }
    CHECK(!"tcmd.exe did not come up");
    return NULL;
}

/* Role "freer": check and free every object the first process made. */
static int freer(void)
{
    CHECK_EQ(tcm_init(tt_role_arg()), 0);
    table_t *t = tcm_root_get("table");
    CHECK(t != NULL);
    CHECK_EQ(t->n, OBJECTS);
    for (uint32_t i = 0; i < t->n; i++) {
        CHECK(intact(t->objs[i], size_of(i), i));
        tcm_free(t->objs[i]);
        t->objs[i] = NULL;
    }
    tcm_shutdown();
    return 0;
}

/* Role "holder": fill its caches (allocate, then free), say so, and wait
 * to be killed. */
static int holder(void)
{
    static void *objs[5000];
    CHECK_EQ(tcm_init(tt_role_arg()), 0);
    for (uint32_t i = 0; i < 5000; i++)
        fill(objs[i] = tcm_malloc(size_of(i)), size_of(i), i);
    for (uint32_t i = 0; i < 5000; i++)
        tcm_free(objs[i]);
    _Atomic uint32_t *flag = tcm_root_get("flag");
    CHECK(flag != NULL);
    atomic_store(flag, 1);
    Sleep(60000);
    return 1;
}

int main(void)
{
    const char *role = tt_role();
    if (role && strcmp(role, "freer") == 0)
        return freer();
    if (role && strcmp(role, "holder") == 0)
        return holder();

    snprintf(socket_path, sizeof socket_path, "/tcm-e2e-%u", (unsigned)tcm__pid());
    HANDLE tcmd = start_tcmd();
    CHECK_EQ(tcm_init(socket_path), 0);

    /* one process allocates, another frees */
    table_t *t = tcm_malloc(sizeof *t);
    CHECK(t != NULL);
    for (uint32_t i = 0; i < OBJECTS; i++) {
        t->objs[i] = tcm_malloc(size_of(i));
        CHECK(t->objs[i] != NULL);
        CHECK_EQ(tcm_usable_size(t->objs[i]) >= size_of(i), 1);
        fill(t->objs[i], size_of(i), i);
    }
    t->n = OBJECTS;
    CHECK_EQ(tcm_root_set("table", t), 0);
    uint64_t held = stat_of("bytes_clients");
    tt_proc_t p;
    bool timed_out;
    CHECK_EQ(tt_spawn_self("freer", socket_path, &p), 0);
    CHECK_EQ(tt_proc_wait(p, 60000, &timed_out), 0);
    for (uint32_t i = 0; i < OBJECTS; i++)
        CHECK(t->objs[i] == NULL);
    uint64_t after = stat_of("bytes_clients");
    printf("e2e: %u objects made here, freed in another process: bytes held by clients %llu -> %llu\n",
           OBJECTS, (unsigned long long)held, (unsigned long long)after);
    CHECK_LT(after, held / 2);
    /* what the other process gave back is ours to allocate again */
    allocate_all(t, OBJECTS);
    check_and_free_all(t, OBJECTS);

    /* a client killed with full caches: tcmd takes them back */
    _Atomic uint32_t *flag = tcm_calloc(1, sizeof *flag);
    CHECK_EQ(tcm_root_set("flag", flag), 0);
    uint64_t before = stat_of("bytes_clients");
    CHECK_EQ(tt_spawn_self("holder", socket_path, &p), 0);
    for (int i = 0; i < 2000 && !atomic_load(flag); i++)
        Sleep(10);
    CHECK_EQ(atomic_load(flag), 1);
    uint64_t with_holder = stat_of("bytes_clients");
    CHECK_GT(with_holder, before + 1000000);
    TerminateProcess((HANDLE)p.id, 137);
    CHECK_EQ(tt_proc_wait(p, 10000, &timed_out), 137);
    uint64_t back = with_holder;
    for (int i = 0; i < 500 && (back = stat_of("bytes_clients")) > before + 65536; i++)
        Sleep(20);
    printf("e2e: killed client: bytes held by clients %llu -> %llu -> %llu\n", (unsigned long long)before,
           (unsigned long long)with_holder, (unsigned long long)back);
    CHECK_LE(back, before + 65536);

    /* tcmd killed and started again: the heap outlives it (this process
     * keeps its segments, tcmd left it handles to them) and the new tcmd
     * adopts it; this process rides through */
    allocate_all(t, 1000);
    uint64_t served = stat_of("requests");
    TerminateProcess(tcmd, 137);
    WaitForSingleObject(tcmd, INFINITE);
    CloseHandle(tcmd);
    tcmd = start_tcmd();
    check_and_free_all(t, 1000);
    for (uint32_t round = 0; round < 5; round++) { /* beyond what the caches hold: through the new tcmd */
        allocate_all(t, OBJECTS);
        check_and_free_all(t, OBJECTS);
    }
    CHECK_GT(stat_of("requests"), served); /* the new tcmd served us (the counters are the adopted heap's) */
    printf("e2e: tcmd killed and restarted: the heap was adopted, this process rode through\n");

    tcm_free(flag);
    tcm_free(t);
    tcm_shutdown();
    TerminateProcess(tcmd, 0);
    CloseHandle(tcmd);
    printf("e2e: ok\n");
    return 0;
}
