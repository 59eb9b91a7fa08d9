/* channel.h — requests to tcmd on the channel's slots, and giving objects
 * back (channel.c). */
#ifndef TCM_CLIENT_CHANNEL_H
#define TCM_CLIENT_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

/* one request on a slot; returns the slot's status or
 * TCM_ST_NOMEM when the daemon is gone. */
TCM_HIDDEN int tcm__call(tcm_slot_t *slot, uint32_t slot_index);
TCM_HIDDEN bool tcm__post(tcm_slot_t *slot, uint32_t slot_index);
/* Posted without waking tcmd: served at the heap thread's next turn,
 * whoever causes it (another request, its one-second timeout, or the
 * tcm__await of this slot, which rings first). For requests nobody waits
 * on: the heap profile's. */
TCM_HIDDEN bool tcm__post_quiet(tcm_slot_t *slot, uint32_t slot_index);
/* Wakes tcmd's heap thread if it sleeps (what tcm__post does after the
 * push). */
TCM_HIDDEN void tcm__ring_bell(void);
/* ThreadSanitizer builds: an offset from another process orders after
 * what this process gave tcmd (channel.c); nothing otherwise. */
#if defined(__SANITIZE_THREAD__)
TCM_HIDDEN void tcm__tsan_from_elsewhere(void);
#else
static inline void tcm__tsan_from_elsewhere(void) {}
#endif
TCM_HIDDEN int tcm__await(tcm_slot_t *slot);
/* The same for a slot posted with tcm__post (its bell rung already: a
 * second ring would be a second futex wake while tcmd wakes up). */
TCM_HIDDEN int tcm__await_rung(tcm_slot_t *slot);
TCM_HIDDEN tcm_slot_t *tcm__slot_acquire(uint32_t *index);
TCM_HIDDEN void tcm__slot_release(tcm_slot_t *slot);
/* Give the top n of objs[0..*count) back to tcmd a batch at a time, *count
 * dropping as each is answered (count NULL: an array of one's own). */
TCM_HIDDEN int tcm__return_objects(unsigned cls, void **objs, uint32_t n, uint32_t *count);
/* A slot acquired and filled with a RETURN of objs[0..k) (k at most
 * TCM_MAX_BATCH), not posted yet; its index in *index. */
TCM_HIDDEN tcm_slot_t *tcm__return_fill(unsigned cls, void *const *objs, uint32_t k, uint32_t *index);
/* One RETURN of objs[0..k) (k at most TCM_MAX_BATCH), posted and answered;
 * the slot stays held, still listing them, until tcm__return_done: the
 * caller drops them from its own array in between, so that a death at any
 * point leaves every object listed at least once. */
TCM_HIDDEN tcm_slot_t *tcm__return_post(unsigned cls, void *const *objs, uint32_t k, int *status);
TCM_HIDDEN void tcm__return_done(tcm_slot_t *slot, int status, unsigned cls);
/* Back [addr, +len) of the channel before it is written: on tcmd's a full
 * /dev/shm is then an error here rather than a SIGBUS at the write. A
 * private heap's channel is the process's anonymous memory, backed as
 * written: nothing to do (nor in tcm__back_array). 0 or -errno. */
TCM_HIDDEN int tcm__back(void *addr, uint64_t len);
/* Back the first `want` entries of an object array in the channel before
 * they are written; returns how many are backed (fewer only when /dev/shm
 * is full). */
TCM_HIDDEN uint32_t tcm__back_array(void **objs, uint32_t *backed, uint32_t want);
TCM_HIDDEN void tcm__fatal_refused(int st, unsigned cls) __attribute__((noreturn));

#endif
