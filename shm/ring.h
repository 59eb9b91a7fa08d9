/* ring.h — the lock-free MPSC request ring of a client channel and the
 * doorbell that wakes the daemon's heap thread.
 *
 * Producers (the client's threads) claim a position with a CAS on head and
 * publish the cell by storing seq = pos + 1 (release). The single consumer
 * (the heap thread) keeps its tail where clients cannot write it (the
 * client's record in the state segment), reads the cell when seq == tail + 1
 * (acquire) and frees it with seq = tail + cap only once the request is
 * committed. Cells are client-writable: the consumer acts only on an exact
 * sequence match, so a corrupt ring stalls that client alone and never the
 * daemon.
 *
 * Wakeup (no lost wakeups): the heap thread reads bell.seq, stores
 * heap_sleeping = 1, fences, scans every ring once more and only then waits
 * on bell.seq with the value it read. A producer publishes, fences, and if it
 * sees heap_sleeping it increments bell.seq before waking it. The fences make
 * one side see the other: either the scan finds the request or the producer
 * sees the flag, and a bump after the read makes the wait return at once. */
#ifndef TCM_RING_H
#define TCM_RING_H

#include "prim.h"
#include "tcm_layout.h"

static inline void tcm__ring_init(tcm_ring_t *r, uint32_t cap)
{
    atomic_store_explicit(&r->head, 0, memory_order_relaxed);
    for (uint32_t i = 0; i < cap; i++)
        atomic_store_explicit(&r->cells[i].seq, i, memory_order_relaxed);
}

/* Producer side; false when the ring is full. */
static inline bool tcm__ring_push(tcm_ring_t *r, uint32_t cap, uint32_t slot)
{
    uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
    for (;;) {
        tcm_ring_cell_t *cell = &r->cells[pos & (cap - 1)];
        uint64_t seq = atomic_load_explicit(&cell->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - pos);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed)) {
                cell->slot = slot;
                atomic_store_explicit(&cell->seq, pos + 1, memory_order_release);
                return true;
            }
        } else if (dif < 0) {
            return false;
        } else {
            pos = atomic_load_explicit(&r->head, memory_order_relaxed);
        }
    }
}

/* Consumer side: the slot named by the cell at position pos, if that cell
 * is full. The cell stays full until tcm__ring_release, so a consumer that
 * dies while serving it finds it again. */
static inline bool tcm__ring_peek(tcm_ring_t *r, uint32_t cap, uint64_t pos, uint32_t *slot)
{
    tcm_ring_cell_t *cell = &r->cells[pos & (cap - 1)];
    uint64_t seq = atomic_load_explicit(&cell->seq, memory_order_acquire);
    if (seq != pos + 1)
        return false;
    *slot = cell->slot;
    return true;
}

/* Consumer side: the request at pos is committed; its cell may be reused. */
static inline void tcm__ring_release(tcm_ring_t *r, uint32_t cap, uint64_t pos)
{
    atomic_store_explicit(&r->cells[pos & (cap - 1)].seq, pos + cap, memory_order_release);
}

/* Recovery: a consumer killed between committing position tail - 1 and
 * freeing its cell left the cell full; free it. */
static inline bool tcm__ring_repair(tcm_ring_t *r, uint32_t cap, uint64_t tail)
{
    if (tail == 0)
        return false;
    tcm_ring_cell_t *cell = &r->cells[(tail - 1) & (cap - 1)];
    if (atomic_load_explicit(&cell->seq, memory_order_acquire) != tail)
        return false;
    tcm__ring_release(r, cap, tail - 1);
    return true;
}

static inline bool tcm__ring_ready(tcm_ring_t *r, uint32_t cap, uint64_t tail)
{
    return atomic_load_explicit(&r->cells[tail & (cap - 1)].seq, memory_order_acquire) == tail + 1;
}

/* Producer side, after a push: wake the heap thread if it sleeps. */
static inline void tcm__bell_ring(_Atomic uint32_t *sleeping, tcm_bell_t *bell)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(sleeping, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&bell->seq, 1, memory_order_relaxed);
        tcm__wake(&bell->seq, 1);
    }
}

#endif
