/* debug.h — tcm-kv's test hooks, apart from the reference code: DEBUG HOLD
 * and DEBUG CRASH (debug.c) and the crash points between two stores of a
 * table change that DEBUG CRASH arms. integration.kv uses them to kill a
 * worker where a change is half done and check that the next one repairs
 * it. They exist only in tcm-kv-test, the test build (compiled with
 * KV_TEST_HOOKS, never installed); in tcm-kv a crash point is nothing. */
#ifndef KV_DEBUG_H
#define KV_DEBUG_H

#ifdef KV_TEST_HOOKS
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

/* SIGKILL this process at a named point between two stores of a change
 * ("put", "migrate", "rehash") the next time it passes it; NULL: never. */
extern const char *_Atomic kv_crash_at;

#define KV_CRASH_POINT(name)                                                                       \
    do {                                                                                           \
        const char *at_ = atomic_load_explicit(&kv_crash_at, memory_order_relaxed);                \
        if (at_ && !strcmp(at_, name))                                                             \
            raise(SIGKILL);                                                                        \
    } while (0)
#else
#define KV_CRASH_POINT(name) ((void)0)
#endif

#endif
