/* debug.c — the DEBUG command, for the tests only: compiled into
 * tcm-kv-test alone (see debug.h). */
#define _GNU_SOURCE
#include "debug.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "worker.h"

const char *_Atomic kv_crash_at;

/* DEBUG HOLD key ms: hold the key's stripe locked for ms (a worker to kill
 * while it holds a lock); DEBUG CRASH point: die at that point of the next
 * change (see kv_crash_at). */
void cmd_debug(cmd_ctx_t *x)
{
    static char point[32];
    long long ms;
    if (arg_is(&x->a[1], "HOLD") && x->n == 4 && to_ll(x->a[3].p, x->a[3].n, &ms) && ms >= 0 && ms <= 60000) {
        uint64_t h = kv_hash(x->a[2].p, x->a[2].n);
        kv_stripe_t *s = kv_lock(x->w->t, h);
        /* the line the test waits for before it kills this worker */
        fprintf(stderr, "tcm-kv: DEBUG HOLD: pid %d holds the stripe lock of \"%.*s\" for %lld ms\n", (int)getpid(),
                (int)x->a[2].n, x->a[2].p, ms);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
        kv_unlock(s);
        out_ok(x->c);
    } else if (arg_is(&x->a[1], "CRASH") && x->n == 3 && x->a[2].n < sizeof point) {
        memcpy(point, x->a[2].p, x->a[2].n);
        point[x->a[2].n] = 0;
        atomic_store(&kv_crash_at, point);
        out_ok(x->c);
    } else {
        out_err(x->c, "%s", ERR_SYNTAX);
    }
}
