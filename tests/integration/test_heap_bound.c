/* The heap's size is bounded by what its page map can index (page numbers
 * are 32-bit: at most UINT32_MAX pages of 8 KiB) and by the address space
 * at its base: a larger heap_size is refused at start, a larger heap_limit
 * at resize, each with a message that says why; a heap of exactly the
 * bound starts, serves a client and passes the validator. The segments are
 * sparse (a 32 TiB heap costs a few blocks of /dev/shm until pages are
 * used), which the test checks as it goes. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"

#define BOUND 35184372080640ull /* (2^32 - 1) * 8 KiB */
#define BOUND_S "35184372080640"
/* 32 TiB up: clear of ASan's shadow (below 16 TiB + 2 GiB) and of the
 * program, its heap and the libraries (near 0x5555... and 0x7f...) */
#define LOW_BASE "0x200000000000"

static void expect_refused(const char *args, const char *why)
{
    char cmd[512], out[2048];
    /* (a tcmd that accepts them serves until the timeout: exit 124) */
    snprintf(cmd, sizeof cmd,
             "timeout 20 %s --foreground --socket /tmp/tcmtest-bound-%d.sock --name bound%d --log /dev/stdout %s 2>&1",
             TCMD_PATH, (int)getpid(), (int)getpid(), args);
    int rc = tt_run(cmd, out, sizeof out);
    printf("tcmd %s: exit %d: %s", args, rc, out);
    CHECK_EQ(rc, 2);
    CHECK(strstr(out, why) != NULL);
}

/* blocks of /dev/shm the segments of d take */
static unsigned long long shm_kib(const tcm_test_daemon_t *d)
{
    static const char *const parts[] = {"heap", "meta", "state"};
    unsigned long long kib = 0;
    for (unsigned i = 0; i < 3; i++) {
        char path[128];
        struct stat st;
        snprintf(path, sizeof path, "/dev/shm/tcm.%s.%s", d->name, parts[i]);
        CHECK_EQ(stat(path, &st), 0);
        kib += (unsigned long long)st.st_blocks / 2;
    }
    return kib;
}

int main(void)
{
    /* one page past the bound, and 32T (a round number just past it) */
    expect_refused("--heap-size 35184372088832 --base " LOW_BASE, "page numbers are 32-bit");
    expect_refused("--heap-size 32T --base " LOW_BASE, "more than a heap can be, " BOUND_S " bytes");
    /* inside the bound, but not inside the address space at the base */
    expect_refused("--heap-size 2T", "past the end of the address space");
    expect_refused("--heap-size 16T --base 0x7ff000000000", "at most 64.0G at this base");

#ifdef __SANITIZE_THREAD__
    /* ThreadSanitizer keeps programs to its own ranges of the address space
     * (the default base is in one); a heap this size fits none of them */
    printf("heap at the bound: not under ThreadSanitizer\n");
    return 0;
#endif
    tcm_test_daemon_t d;
    const char *const args[] = {"--heap-size", BOUND_S, "--base", LOW_BASE, NULL};
    tt_daemon_start(&d, args);
    CHECK_EQ(tcm_init(d.socket), 0);
    void *small = tcm_malloc(64), *large = tcm_malloc(1 << 20);
    CHECK(small != NULL && large != NULL);
    CHECK_GE((unsigned long long)(uintptr_t)small, 0x200000000000ull);
    CHECK_LT((unsigned long long)(uintptr_t)large, 0x200000000000ull + BOUND);
    memset(large, 1, 1 << 20);
    tt_check_heap(&d);
    char out[2048];
    /* resize: past the bound refused with the reason; the bound itself (the
     * whole heap) and below accepted */
    CHECK_EQ(tt_tcmctl(&d, "resize 35184372088832", out, sizeof out), 1);
    printf("resize past the bound: %s", out);
    CHECK(strstr(out, "page numbers are 32-bit") != NULL);
    CHECK_EQ(tt_tcmctl(&d, "resize 64M", out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&d, "resize " BOUND_S, out, sizeof out), 0);
    CHECK_EQ(tt_tcmctl(&d, "--json config get heap_limit", out, sizeof out), 0);
    CHECK(strstr(out, "\"value\":\"" BOUND_S "\"") != NULL);
    unsigned long long kib = shm_kib(&d);
    printf("segments of a %llu-byte heap take %llu KiB of /dev/shm\n", BOUND, kib);
    CHECK_LT(kib, 64 * 1024);
    tcm_free(small);
    tcm_free(large);
    tcm_shutdown();
    tt_daemon_stop(&d);
    return 0;
}
