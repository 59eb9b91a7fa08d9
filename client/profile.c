/* profile.c — sampling for the heap profile (docs/DESIGN.md, "Heap
 * profiles"). Each thread counts down the bytes it allocates (the hit path
 * subtracts each size from tcm__hot.sample_left); the allocation that
 * takes the count below zero is sampled: it gets a page run of its own
 * (tcache.c), so that its free reaches tcmd whoever frees it, and tcmd is
 * told of it with the thread's stack. The intervals are exponential with
 * the mean profile_sample, as tcmalloc's, so every byte is equally likely
 * to be sampled and a sample of s bytes stands for s / (1 - e^(-s/mean)). */
#define _GNU_SOURCE
#include "profile.h"

#include <string.h>

#include "channel.h"
#include "diag.h"
#include "prim.h"

/* -ln(u) for u in (0, 1]: ln of the mantissa by its atanh series (error
 * under 1e-6, plenty for an interval), no libm. */
static double neg_log(double u)
{
    uint64_t bits;
    memcpy(&bits, &u, sizeof bits);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & ((1ull << 52) - 1)) | (1023ull << 52);
    double m, t;
    memcpy(&m, &bits, sizeof m); /* u = m * 2^e, m in [1, 2) */
    t = (m - 1) / (m + 1);
    double t2 = t * t;
    double ln_m = 2 * t * (1 + t2 * (1.0 / 3 + t2 * (1.0 / 5 + t2 * (1.0 / 7 + t2 * (1.0 / 9 + t2 / 11)))));
    return -(e * 0.6931471805599453 + ln_m);
}

uint64_t tcm__sample_draw(tcm_thread_t *thr, uint64_t mean)
{
    uint64_t x = thr->sample_rng ? thr->sample_rng : tcm__random64() | 1;
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27; /* xorshift64* */
    thr->sample_rng = x;
    double u = ((double)((x * 0x2545f4914f6cdd1dull) >> 11) + 0.5) * 0x1p-53;
    double v = neg_log(u) * (double)mean;
    return v < 1 ? 1 : v > 0x1p62 ? (uint64_t)1 << 62 : (uint64_t)v;
}

uint64_t tcm__sample_mean_for(uint64_t weight, uint64_t size)
{
    if (!size)
        size = 1;
    if (weight <= size)
        return 1; /* it stands for itself alone */
    double x = (double)size / (double)weight, l = 0, p = 1;
    if (x < 0.5)
        for (int k = 1; k <= 40; k++) /* -ln(1 - x) by its series: neg_log is coarse near 1 */
            l += (p *= x) / k;
    else
        l = neg_log(1 - x);
    double m = (double)size / l;
    return m < 1 ? 1 : m > 0x1p62 ? (uint64_t)1 << 62 : (uint64_t)m;
}

/* A sample costs the thread microseconds (its stack unwound, a page run
 * of its own from tcmd): a thread that allocates gigabytes a second would
 * spend much of its time sampling. So a thread takes about profile_rate
 * samples a second at most: a sample sooner than a quarter of 1/rate after
 * the last (from the end of the last, or from the thread's first malloc)
 * sets the mean its next interval is drawn around to the bytes the thread
 * allocates in 1/rate at the pace it just had (the interval it counted
 * down over the time that took; at least twice the mean), so that a
 * thread's first burst costs a sample or two, not one per doubling; one
 * later than 1/rate halves it back towards profile_sample. A new thread
 * starts at the mean the process's last sample set (threads that come and
 * go would each start at profile_sample, and take their first samples at
 * its pace, whatever the rate). Each sample keeps the mean its interval
 * was drawn around, so its weight, and the profile, stay unbiased. */
#define SAMPLE_MEAN_MAX (1ull << 44) /* (it travels in 32 bits: tcm__sample_interval_pack) */

void tcm__sample_arm(tcm_thread_t *thr, bool sampled)
{
    uint64_t base = atomic_load_explicit(&tcm__proc.meta->profile_sample, memory_order_relaxed);
    uint32_t rate = atomic_load_explicit(&tcm__proc.meta->profile_rate, memory_order_relaxed);
    if (base != thr->sample_base) { /* a new thread starts at the pace of the process's last sample */
        uint64_t pace = rate ? atomic_load_explicit(&tcm__proc.sample_pace, memory_order_relaxed) : 0;
        thr->sample_base = base;
        thr->sample_mean = pace > base ? pace : base;
    }
    thr->sample_armed = true;
    if (!base) {
        tcm__countdown_set(thr, INT64_MAX);
        return;
    }
    if (!sampled && rate && !thr->sample_ns)
        thr->sample_ns = tcm__now_ns(); /* the thread's first malloc: its first gap counts from here */
    if (sampled && rate) {
        uint64_t gap = tcm__now_ns() - thr->sample_ns, per = 1000000000u / rate;
        if (gap < per / 4 && thr->sample_mean < SAMPLE_MEAN_MAX) {
            double paced = (double)thr->sample_drawn * (double)per / (double)(gap ? gap : 1);
            double mean = paced > 2.0 * (double)thr->sample_mean ? paced : 2.0 * (double)thr->sample_mean;
            thr->sample_mean = mean < (double)SAMPLE_MEAN_MAX ? (uint64_t)mean : SAMPLE_MEAN_MAX;
        } else if (gap > per && thr->sample_mean > base)
            thr->sample_mean = thr->sample_mean / 2 > base ? thr->sample_mean / 2 : base;
        atomic_store_explicit(&tcm__proc.sample_pace, thr->sample_mean, memory_order_relaxed);
    } else if (!rate) {
        thr->sample_mean = base;
    }
    tcm__countdown_set(thr, (int64_t)(thr->sample_drawn = tcm__sample_draw(thr, thr->sample_mean)));
}

void tcm__sample_done(tcm_thread_t *thr)
{
    if (atomic_load_explicit(&tcm__proc.meta->profile_rate, memory_order_relaxed))
        thr->sample_ns = tcm__now_ns(); /* the next gap leaves out what this sample cost */
}

/* ---- what tcmd is told ---- */

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER; /* fork.c resets it */
static uint32_t maps_client;   /* the client the text was last sent as (a fork child is another) */
static uint64_t maps_gen;      /* tcm__code_maps_gen() then */

_Static_assert(TCM_SAMPLE_MAPS_BYTES <= sizeof(((tcm_slot_t *)0)->offs), "the text goes in one MAPS");

bool tcm__maps_due(void)
{
    uint64_t gen = tcm__code_maps_gen();
    pthread_mutex_lock(&maps_lock);
    /* once, whatever tcmd answers: a text it refuses is not sent again
     * until the objects change */
    bool due = maps_client != tcm__proc.client_id || maps_gen != gen;
    maps_client = tcm__proc.client_id;
    maps_gen = gen;
    pthread_mutex_unlock(&maps_lock);
    return due;
}

void tcm__maps_fill(tcm_slot_t *slot)
{
    size_t len = tcm__code_maps((char *)slot->offs, TCM_SAMPLE_MAPS_BYTES);
    slot->op = TCM_OP_MAPS;
    slot->arg = 0;
    slot->arg2 = len;
    slot->count = (uint32_t)len;
}

/* A process's first sample would pay, on the thread that allocates, for
 * the unwinder's first use (libgcc reads the unwind tables of the objects
 * on the stack, a page fault at a time: 50-100 us on this guest) and the
 * first walk of the loaded objects' headers for the mappings text (30-80
 * us). The background thread pays them instead, once, as the process
 * attaches while sampling is on (nothing it waits for: a fork or a
 * shutdown joins it); the first sample's unwind still reads the program's
 * own tables, and the text itself goes at a thread's first malloc
 * (tcache.c, maps_post_if_due). */
void tcm__profile_warm(void)
{
    char text[TCM_SAMPLE_MAPS_BYTES];
    uint64_t frames[TCM_SAMPLE_FRAMES];
    if (!atomic_load_explicit(&tcm__proc.meta->profile_sample, memory_order_relaxed))
        return;
    (void)tcm__backtrace(frames, TCM_SAMPLE_FRAMES, 0);
    (void)tcm__code_maps(text, sizeof text);
}

void tcm__profile_fork_child(void)
{
    pthread_mutex_init(&maps_lock, NULL); /* another thread of the parent may have held it */
}

void tcm__sample_fill(tcm_slot_t *slot, uint64_t run, size_t size, uint64_t interval, uintptr_t above)
{
    slot->op = TCM_OP_SAMPLE;
    slot->arg = run;
    slot->arg2 = size;
    slot->cls = tcm__sample_interval_pack(interval);
    slot->count = tcm__backtrace(slot->offs, TCM_SAMPLE_FRAMES, above);
}
