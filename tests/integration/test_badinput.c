/* Untrusted input never hurts the daemon: garbage, truncated and oversized
 * control frames, hundreds of idle connections, and a client that writes
 * garbage into its own ring and slots (stocks of sample runs included).
 * Each bad request is refused with an error code and counted; good objects
 * next to bad ones are not lost. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "frame.h"
#include "prim.h"
#include "ring.h"
#include "tcm.h"
#include "rawclient.h"
#include "testutil.h"

static tcm_test_daemon_t d;

static void ping_ok(void)
{
    int fd = tcm__connect(d.socket);
    CHECK_GE(fd, 0);
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__Ping ping = TCM__PING__INIT;
    ping.nonce = 42;
    req.version = TCM_PROTO_VERSION;
    req.body_case = TCM__REQUEST__BODY_PING;
    req.ping = &ping;
    CHECK_EQ(tcm__frame_send(fd, &req), 0);
    Tcm__Response *resp = tcm__frame_recv(fd, 5000);
    CHECK(resp != NULL);
    CHECK_EQ(resp->body_case, TCM__RESPONSE__BODY_PONG);
    CHECK_EQ(resp->pong->nonce, 42);
    tcm__response__free_unpacked(resp, NULL);
    close(fd);
}

/* Send raw bytes; return the daemon's answer (error reply) or NULL if it
 * just closed the connection. */
static Tcm__Response *send_raw(const void *buf, size_t len, bool expect_answer)
{
    int fd = tcm__connect(d.socket);
    CHECK_GE(fd, 0);
    CHECK_EQ(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
    Tcm__Response *resp = expect_answer ? tcm__frame_recv(fd, 5000) : NULL;
    close(fd);
    return resp;
}

static void test_frames(void)
{
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    junk[0] = 0, junk[1] = 0, junk[2] = 0, junk[3] = 40; /* a 40-byte frame of junk */
    Tcm__Response *r = send_raw(junk, 44, true);
    CHECK(r != NULL);
    CHECK_EQ(r->body_case, TCM__RESPONSE__BODY_ERROR);
    tcm__response__free_unpacked(r, NULL);

    uint8_t huge[8] = {0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4};
    r = send_raw(huge, sizeof huge, true);
    CHECK(r != NULL);
    CHECK_EQ(r->body_case, TCM__RESPONSE__BODY_ERROR);
    CHECK_EQ(r->error->code, EMSGSIZE);
    tcm__response__free_unpacked(r, NULL);

    uint8_t truncated[10] = {0, 0, 0, 100, 1, 2, 3, 4, 5, 6};
    send_raw(truncated, sizeof truncated, false);

    uint8_t empty_request[4] = {0, 0, 0, 0}; /* a valid Request with no body */
    r = send_raw(empty_request, 4, true);
    CHECK(r != NULL);
    CHECK_EQ(r->body_case, TCM__RESPONSE__BODY_ERROR);
    tcm__response__free_unpacked(r, NULL);

    /* a request from a future protocol gets a typed error */
    {
        Tcm__Request req = TCM__REQUEST__INIT;
        Tcm__Ping ping = TCM__PING__INIT;
        req.version = 99;
        req.body_case = TCM__REQUEST__BODY_PING;
        req.ping = &ping;
        size_t len;
        uint8_t *buf = tcm__frame_pack(&req.base, &len);
        r = send_raw(buf, len, true);
        free(buf);
        CHECK(r != NULL);
        CHECK_EQ(r->body_case, TCM__RESPONSE__BODY_ERROR);
        CHECK_EQ(r->error->code, EPROTONOSUPPORT);
        tcm__response__free_unpacked(r, NULL);
    }

    /* a random-bytes storm */
    srand(7);
    for (int i = 0; i < 200; i++) {
        uint8_t buf[300];
        size_t n = 1 + (size_t)rand() % sizeof buf;
        for (size_t k = 0; k < n; k++)
            buf[k] = (uint8_t)rand();
        if (rand() % 2) { /* a plausible length prefix */
            uint32_t len = (uint32_t)(n > 4 ? n - 4 : 0);
            buf[0] = 0, buf[1] = 0, buf[2] = (uint8_t)(len >> 8), buf[3] = (uint8_t)len;
        }
        send_raw(buf, n, false);
    }
    ping_ok();
}

static void test_idle_connections(void)
{
    enum { N = 300 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = tcm__connect(d.socket);
        CHECK_GE(fds[i], 0);
    }
    uint64_t t0 = tcm__now_ns();
    ping_ok();
    CHECK_LT(tcm__now_ns() - t0, 2000000000ull);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    ping_ok();
}

/* Another process (this one is the raw client: one client per process). */
static int other_client(void *arg)
{
    (void)arg;
    void *p = tcm_malloc(100);
    CHECK(p != NULL);
    tcm_free(p);
    return 0;
}

static void test_ring_garbage(void)
{
    tt_raw_t r;
    tt_raw_attach(&r, d.socket);
    tcm_slot_t *s = &r.slots[0];
    uint64_t refused0 = tt_stat(&d, "refused");

    s->op = 99;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_BAD_OP);
    s->op = TCM_OP_REFILL, s->cls = 0, s->count = 1;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_BAD_CLASS);
    s->cls = 200;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_BAD_CLASS);
    s->cls = 5, s->count = 100000;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_BAD_COUNT);
    s->op = TCM_OP_FREE_PAGES, s->arg = 1ull << 50;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_BAD_OFFSET);
    s->op = TCM_OP_ALLOC_PAGES, s->arg = 1ull << 40, s->arg2 = 1;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_NOMEM);
    /* a stock of sample runs: too many, none, runs of two pages */
    s->cls = TCM_ALLOC_SAMPLE_RUNS, s->arg = 1, s->count = TCM_SAMPLE_RUNS_MAX + 1;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_BAD_COUNT);
    s->count = 0;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_BAD_COUNT);
    s->arg = 2, s->count = 2;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_BAD_COUNT);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0); /* nothing handed out */
    s->cls = 0;
    s->op = TCM_OP_ROOT_SET, s->arg = 4096;
    memset(s->offs, 'x', sizeof s->offs); /* name without a terminator */
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_BAD_NAME);

    /* a slot index beyond the slots, and a slot that was not posted */
    tt_raw_post_only(&r, r.lay.nslots + 5);
    atomic_store(&r.slots[1].state, TCM_SLOT_IDLE);
    tt_raw_post_only(&r, 1);

    /* get 4 real objects, then return them mixed with bad offsets */
    unsigned cls = tcm__size_class(64);
    s->op = TCM_OP_REFILL, s->cls = cls, s->count = 4;
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_OK);
    CHECK_EQ(s->nresult, 4);
    uint64_t good[4];
    memcpy(good, s->offs, sizeof good);
    uint64_t held_before = tt_stat(&d, "bytes_clients");
    s->op = TCM_OP_RETURN, s->cls = cls, s->count = 8;
    s->offs[0] = good[0];
    s->offs[1] = 1ull << 60;   /* outside */
    s->offs[2] = good[1] + 16; /* interior */
    s->offs[3] = good[1];
    s->offs[4] = good[0];      /* double free */
    s->offs[5] = 0;            /* the doorbell page */
    s->offs[6] = good[2];
    s->offs[7] = good[3];
    CHECK_EQ(tt_raw_call(&r, 0), TCM_ST_BAD_OFFSET); /* the first refusal */
    CHECK_EQ(s->result, 4);                       /* four refused */
    CHECK_EQ(held_before - tt_stat(&d, "bytes_clients"), 4 * 64); /* all four good ones freed */

    /* a corrupt ring cell stalls only this client */
    uint64_t head = atomic_load(&r.ring->head);
    atomic_store(&r.ring->cells[head & (r.lay.ring_cap - 1)].seq, head + 12345);
    tcm__bell_ring((_Atomic uint32_t *)&r.meta->heap_sleeping, r.bell);
    CHECK_GE(tt_stat(&d, "refused"), refused0 + 11 + 4);
    tt_wait_ok(tt_fork(other_client, NULL), 20000); /* another client is served as usual */
    ping_ok();
    close(r.sock); /* the daemon reclaims the raw client */
    CHECK(tt_daemon_alive(&d));
}

int main(void)
{
    tt_daemon_start(&d, NULL);
    CHECK_EQ(tcm_init(d.socket), 0);
    static const tt_case_t cases[] = {
        {"frames", test_frames},
        {"idle connections", test_idle_connections},
        {"ring garbage", test_ring_garbage},
    };
    int failed = tt_run_cases("badinput", cases, sizeof cases / sizeof cases[0], 120000);
    tcm_shutdown();
    CHECK_EQ(tt_wait_stat(&d, "clients_attached", 0, 5000), 0);
    CHECK_EQ(tt_stat(&d, "bytes_clients"), 0);
    tt_daemon_stop(&d);
    return failed != 0;
}
