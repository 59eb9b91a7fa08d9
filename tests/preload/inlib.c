/* inlib.c — what the drop-in's own code allocates is the system malloc's,
 * on a thread tcm serves too. Run with TCM_MALLOC_FORK=shared under
 * LD_PRELOAD="libtcm-malloc.so libtcm-test-sysmalloc.so"
 * (tests/preload_test.sh): the second library is the system malloc the
 * drop-in finds, and counts the allocations of up to 1 KiB the calling
 * thread sends it. tcm_stat("bytes_committed") asks tcmd, and protobuf-c
 * decodes the answer with the library's own mallocs: on a thread that
 * never allocated (no cache) every one goes to the system malloc, and on
 * one whose bins of every size up to 1 KiB hold objects they must too,
 * as many, where a hit path that took them would serve some. The
 * program's own malloc, aligned_alloc and posix_memalign are tcm's (none
 * counted). Prints "ok", or the counts. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { WARM = 4, LARGEST = 1024 }; /* objects a size; sizes up to LARGEST, 16 B apart */

static unsigned long (*system_allocations)(void);
static int (*stat)(const char *, uint64_t *);

/* the library's allocations of one tcm_stat on the calling thread */
static unsigned long stat_allocations(int *rc)
{
    uint64_t committed = 0;
    unsigned long before = system_allocations();
    *rc = stat("bytes_committed", &committed);
    return system_allocations() - before;
}

static int cold_rc;
static unsigned long cold;

static void *cold_thread(void *arg)
{
    (void)arg;
    cold = stat_allocations(&cold_rc);
    return NULL;
}

int main(void)
{
    system_allocations = (unsigned long (*)(void))dlsym(RTLD_DEFAULT, "tt_system_allocations");
    stat = (int (*)(const char *, uint64_t *))dlsym(RTLD_DEFAULT, "tcm_stat");
    if (!system_allocations || !stat) {
        puts("not under the drop-in and the counting malloc");
        return 1;
    }
    static void *warm[LARGEST / 16][WARM];
    for (int s = 0; s < LARGEST / 16; s++)
        for (int i = 0; i < WARM; i++)
            warm[s][i] = malloc(16 * (size_t)s + 8);
    for (int s = 0; s < LARGEST / 16; s++)
        for (int i = 0; i < WARM; i++)
            free(warm[s][i]);
    unsigned long before = system_allocations();
    void *volatile p = malloc(48); /* (volatile: the compiler may not drop the pair) */
    free(p);
    /* aligned ones too: a class whose size is a multiple of the alignment */
    void *volatile a = aligned_alloc(64, 64), *b = NULL;
    if (posix_memalign(&b, 256, 300) || (uintptr_t)a % 64 || (uintptr_t)b % 256) {
        printf("misaligned: %p %p\n", a, b);
        return 1;
    }
    free(a);
    free(b);
    unsigned long program = system_allocations() - before;
    int rc;
    unsigned long served = stat_allocations(&rc);
    pthread_t t;
    if (pthread_create(&t, NULL, cold_thread, NULL) || pthread_join(t, NULL)) {
        puts("pthread_create");
        return 1;
    }
    if (rc != 0 || cold_rc != 0 || program != 0 || cold == 0 || served != cold) {
        printf("tcm_stat: %d and %d; system allocations: the program's %lu, tcm_stat's %lu on a thread with "
               "a cache and %lu on one without\n",
               rc, cold_rc, program, served, cold);
        return 1;
    }
    puts("ok");
    return 0;
}
