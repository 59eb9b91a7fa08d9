/* rawclient.c — see rawclient.h. */
#define _GNU_SOURCE
#include "rawclient.h"

#include <stdatomic.h>
#include <unistd.h>

#include "check.h"
#include "frame.h"
#include "prim.h"
#include "ring.h"

void tt_raw_attach(tt_raw_t *r, const char *socket)
{
    char err[256];
    r->sock = tcm__connect(socket);
    CHECK_GE(r->sock, 0);
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__Hello hello = TCM__HELLO__INIT;
    hello.version = TCM_PROTO_VERSION;
    req.version = TCM_PROTO_VERSION;
    req.body_case = TCM__REQUEST__BODY_HELLO;
    req.hello = &hello;
    CHECK_EQ(tcm__frame_send(r->sock, &req), 0);
    /* the segments come as descriptors (heap, metadata, channel), which is
     * all a client of another user can open */
    tcm_handle_t fds[3] = {-1, -1, -1};
    int nfds = 0;
    Tcm__Response *resp = tcm__frame_recv_fds(r->sock, 5000, fds, 3, &nfds);
    CHECK(resp && resp->body_case == TCM__RESPONSE__BODY_WELCOME);
    CHECK_EQ(nfds, 3);
    const Tcm__Welcome *w = resp->welcome;
    int fd = fds[1];
    r->meta = tcm__map(fd, 4096 * 64, NULL, false, err, sizeof err);
    CHECK(r->meta);
    close(fd);
    fd = fds[0];
    r->bell = tcm__map(fd, 4096, NULL, true, err, sizeof err); /* page 0 only, anywhere */
    CHECK(r->bell);
    close(fd);
    tcm_class_info_t tab[TCM_NCLASSES];
    tcm__class_table_init(tab);
    tcm__chan_layout(&r->lay, tab, w->max_threads, false);
    fd = fds[2];
    r->chan = tcm__map(fd, r->lay.size, NULL, true, err, sizeof err);
    CHECK(r->chan);
    close(fd);
    r->ring = (tcm_ring_t *)(r->chan + r->lay.off_ring);
    r->slots = (tcm_slot_t *)(r->chan + r->lay.off_slots);
    tcm__response__free_unpacked(resp, NULL);
}

int tt_raw_call(tt_raw_t *r, uint32_t idx)
{
    tcm_slot_t *s = &r->slots[idx];
    atomic_store(&s->state, TCM_SLOT_POSTED);
    CHECK(tcm__ring_push(r->ring, r->lay.ring_cap, idx));
    tcm__bell_ring((_Atomic uint32_t *)&r->meta->heap_sleeping, r->bell);
    uint64_t t0 = tcm__now_ns();
    while (atomic_load(&s->state) != TCM_SLOT_DONE) {
        CHECK_LT(tcm__now_ns() - t0, 5000000000ull);
        usleep(100);
    }
    atomic_store(&s->state, TCM_SLOT_IDLE);
    return s->status;
}

void tt_raw_post_only(tt_raw_t *r, uint32_t idx)
{
    CHECK(tcm__ring_push(r->ring, r->lay.ring_cap, idx));
    tcm__bell_ring((_Atomic uint32_t *)&r->meta->heap_sleeping, r->bell);
}
