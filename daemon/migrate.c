/* migrate.c — a heap left by the tcmd of the previous release, brought to
 * this tcmd's state layout at adoption (docs/DESIGN.md, "Upgrades").
 *
 * Only the state segment, which no client maps, is migrated here; the
 * parts clients share keep their ABI version (tcm_layout.h, "Version
 * rule"). Each step turns version N into N+1 in place, before recovery
 * and before any thread runs. A step stores its new fields first and the
 * version last, and reads nothing it writes: tcmd killed between two of its
 * stores leaves version N, and the next tcmd runs the step again from the
 * start. */
#include <string.h>

#include "crash.h"
#include "log.h"
#include "migrate.h"
#include "tcm_version.h"

/* 14 -> 15: the heap's history. The fields are what layout 14's header had
 * as padding, so nothing moves. */
static void history_fields(tcm_state_hdr_t *st)
{
    st->born_version = 14;
    st->reserved3 = 0;
    memset(st->served_by, 0, sizeof st->served_by);
}

/* 15 -> 16: the huge-range hint, a part after the last one, which the
 * segment grew by before it was mapped (segments.c, grow_older_state):
 * zeros, no range known to be huge, which is true of a heap no tcmd
 * collapsed. Nothing to store but the version. */
static void huge_hint(tcm_state_hdr_t *st)
{
    (void)st;
}

/* 16 -> 17: the heap profile (its header, samples and their processes), a
 * part after the last one, grown like the hint: zeros, no sample, which is
 * true of a heap no tcmd sampled. The header page is backed at attach. */
static void heap_profile(tcm_state_hdr_t *st)
{
    (void)st;
}

static const struct {
    uint32_t from;
    void (*step)(tcm_state_hdr_t *st);
} steps[] = {
    {14, history_fields},
    {15, huge_hint},
    {16, heap_profile},
};

_Static_assert(TCM_STATE_VERSION - TCM_STATE_VERSION_OLDEST == sizeof steps / sizeof steps[0],
               "a step for every state version this tcmd adopts");

static int migrate(tcm_state_hdr_t *st)
{
    uint32_t from = st->version;
    char left_by[sizeof st->served_by + 1] = "";
    if (from >= 15) /* the first layout with served_by */
        memcpy(left_by, st->served_by, sizeof st->served_by);
    while (st->version < TCM_STATE_VERSION) {
        unsigned i = st->version - TCM_STATE_VERSION_OLDEST;
        if (st->version < TCM_STATE_VERSION_OLDEST || steps[i].from != st->version) {
            tcm__log(TCM_LOG_ERROR, "no migration from state layout %u", st->version);
            return -1;
        }
        steps[i].step(st);
        TCM_CRASH_POINT(migrate);
        st->version = steps[i].from + 1;
    }
    tcm__log(TCM_LOG_WARN, "the heap's state segment had layout %u (left by tcmd %s): migrated to layout %u",
             from, left_by[0] ? left_by : "0.2.0 or older", TCM_STATE_VERSION);
    return 0;
}

int tcm__state_upgrade(tcm_server_t *srv)
{
    tcm_state_hdr_t *st = srv->state;
    if (srv->adopted && st->version != TCM_STATE_VERSION && migrate(st) != 0)
        return -1;
    /* a torn copy (tcmd killed inside it) is NUL-terminated and is
     * written again by the next tcmd */
    char v[sizeof st->served_by] = {0};
    strncpy(v, TCM_VERSION_STRING, sizeof v - 1);
    memcpy(st->served_by, v, sizeof v);
    return 0;
}
