/* The platform layer (prim.h) between two real processes, on Linux and on
 * Windows (cross-built with mingw-w64, run under Wine): a segment created
 * in one process and mapped at the same address in another, commit and
 * release measured from the OS, the ring with its producer in one process
 * and its consumer in the other, the shared-word wait never missing a
 * wake, one holder per name, and the control channel's transport with the
 * peer's identity. The second process is this program again (spawn.h). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <windows.h>
#else
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#endif

#include "cases.h"
#include "check.h"
#include "prim.h"
#include "ring.h"
#include "spawn.h"

#define MiB (1024ull * 1024)
#define BASE ((void *)0x7ec000000000ull) /* past a tcmd heap at the default base; in TSan's application range */
#define SEG_SIZE (64 * MiB)
#define RING_CAP 64
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define VALUES 20000
#define PINGS 2000
#else
#define VALUES 200000
#define PINGS 20000
#endif

/* What the two sides share, at the start of the segment. */
typedef struct {
    _Atomic uint32_t ready;    /* the child mapped it */
    _Atomic uint32_t sleeping; /* the consumer's heap_sleeping */
    _Atomic uint32_t ping;     /* the ping-pong words: the first process waits on ping, */
    _Atomic uint32_t pong;     /* the second on pong (one waiter per word, as in tcm) */
    uint64_t child_saw;        /* what the child read at the pattern's offset */
    tcm_bell_t bell;
    _Alignas(64) char ring_space[4096]; /* tcm_ring_t + RING_CAP cells */
} shared_t;

static char seg_name[64];

static void make_name(const char *what)
{
    snprintf(seg_name, sizeof seg_name, "/tcm.test-shm.%u.%s", (unsigned)tcm__pid(), what);
}

static shared_t *create_shared(tcm_handle_t *fd, void *at)
{
    char err[256] = "";
    *fd = tcm__shm_create(seg_name, SEG_SIZE, 0600);
    CHECK_GE(*fd, 0);
    CHECK_EQ(tcm__commit(*fd, 0, 64 * 1024), 0);
    shared_t *sh = tcm__map(*fd, SEG_SIZE, at, true, err, sizeof err);
    if (!sh)
        fprintf(stderr, "map: %s\n", err);
    CHECK(sh != NULL);
    return sh;
}

static int run_child(const char *role)
{
    tt_proc_t p;
    bool timed_out;
    CHECK_EQ(tt_spawn_self(role, seg_name, &p), 0);
    int status = tt_proc_wait(p, 120000, &timed_out);
    CHECK(!timed_out);
    return status;
}

/* The child's side: open the parent's segment by name and map it where
 * the parent has it. */
static shared_t *open_shared(void *at, bool writable)
{
    char err[256] = "";
    tcm_handle_t fd = tcm__shm_open(tt_role_arg(), writable);
    CHECK_GE(fd, 0);
    shared_t *sh = tcm__map(fd, SEG_SIZE, at, writable, err, sizeof err);
    if (!sh)
        fprintf(stderr, "child map: %s\n", err);
    CHECK(sh != NULL);
    CHECK(at == NULL || (void *)sh == at);
    tcm__close(fd); /* the view keeps the segment */
    return sh;
}

static void child_same_address(void)
{
    shared_t *sh = open_shared(BASE, true);
    uint64_t *pattern = (uint64_t *)((char *)sh + 32 * MiB);
    sh->child_saw = *pattern;
    *pattern = ~*pattern;
    /* a second view where the first one is: refused, and the message says why */
    tcm_handle_t fd = tcm__shm_open(tt_role_arg(), false);
    CHECK_GE(fd, 0);
    char err[256] = "";
    CHECK(tcm__map(fd, SEG_SIZE, BASE, false, err, sizeof err) == NULL);
    fprintf(stderr, "(expected) %s\n", err);
    CHECK(strstr(err, "clashes with existing mapping") != NULL);
    /* a read-only view elsewhere sees the same bytes */
    const shared_t *ro = tcm__map(fd, SEG_SIZE, NULL, false, err, sizeof err);
    CHECK(ro != NULL);
    CHECK_EQ(*(const uint64_t *)((const char *)ro + 32 * MiB), ~sh->child_saw);
    tcm__close(fd);
    atomic_store(&sh->ready, 1);
}

static void same_address(void)
{
    make_name("seg");
    tcm_handle_t fd;
    shared_t *sh = create_shared(&fd, BASE);
    CHECK(sh == BASE);
    CHECK_EQ(tcm__commit(fd, 32 * MiB, 64 * 1024), 0);
    uint64_t *pattern = (uint64_t *)((char *)sh + 32 * MiB);
    *pattern = 0x7c3a9e51d2b40f68ull;
    CHECK_EQ(run_child("same-address"), 0);
    CHECK_EQ(atomic_load(&sh->ready), 1);
    CHECK_EQ(sh->child_saw, 0x7c3a9e51d2b40f68ull);
    CHECK_EQ(*pattern, ~0x7c3a9e51d2b40f68ull); /* the child's store, through its own view */
    uint64_t size = 0;
    tcm_uid_t uid = 0;
    unsigned mode = 0;
    CHECK_EQ(tcm__shm_stat(fd, &size, &uid, &mode), 0);
    CHECK_EQ(size, SEG_SIZE);
    CHECK_EQ(uid, tcm__uid());
    tcm__unmap(sh, SEG_SIZE);
    tcm__close(fd);
    tcm__shm_unlink(seg_name);
}

static void commit_release(void)
{
    make_name("commit");
    tcm_handle_t fd;
    shared_t *sh = create_shared(&fd, NULL);
    char *region = (char *)sh + 16 * MiB;
    int64_t base = tcm__backed_bytes(fd);
    CHECK_GE(base, 0);
    CHECK_LE(base, 64 * 1024);
    CHECK_EQ(tcm__backed_range(fd, 16 * MiB, 8 * MiB), 0);
    CHECK_EQ(tcm__commit(fd, 16 * MiB, 8 * MiB), 0);
    CHECK_EQ(tcm__backed_bytes(fd), base + (int64_t)(8 * MiB));
    memset(region, 0xab, 8 * MiB);
    CHECK_EQ(tcm__backed_range(fd, 16 * MiB, 8 * MiB), 1); /* tmpfs: a page not yet written reads as a hole */
    CHECK_EQ(tcm__resident_bytes(region, 8 * MiB), (int64_t)(8 * MiB));
    int64_t committed = tcm__backed_bytes(fd);
    CHECK_EQ(tcm__release(fd, 16 * MiB, 8 * MiB), 0);
    /* the physical memory went back */
    CHECK_EQ(tcm__resident_bytes(region, 8 * MiB), 0);
    printf("commit/release of 8 MiB: committed %lld -> %lld -> %lld bytes, resident %lld -> %lld\n",
           (long long)base, (long long)committed, (long long)tcm__backed_bytes(fd), (long long)(8 * MiB),
           (long long)tcm__resident_bytes(region, 8 * MiB));
#ifdef _WIN32
    /* a section's committed pages stay charged until it is closed (prim_win.c) */
    CHECK_EQ(tcm__backed_bytes(fd), base + (int64_t)(8 * MiB));
#else
    CHECK_EQ(tcm__backed_bytes(fd), base);
    CHECK_EQ(tcm__backed_range(fd, 16 * MiB, 8 * MiB), 0);
    CHECK_EQ(region[12345], 0);
#endif
    /* usable again after a new commit */
    CHECK_EQ(tcm__commit(fd, 16 * MiB, 8 * MiB), 0);
    region[4 * MiB] = 7;
    CHECK_EQ(region[4 * MiB], 7);
    /* populate backs a range through its address */
    CHECK_EQ(tcm__populate((char *)sh + 40 * MiB, 1 * MiB), 0);
    CHECK_EQ(tcm__backed_range(fd, 40 * MiB, 1 * MiB), 1);
    tcm__unmap(sh, SEG_SIZE);
    tcm__close(fd);
    tcm__shm_unlink(seg_name);
}

static tcm_ring_t *ring_of(shared_t *sh)
{
    return (tcm_ring_t *)sh->ring_space;
}

/* The producer: pushes VALUES values, rings the bell after each. */
static void child_producer(void)
{
    shared_t *sh = open_shared(NULL, true); /* any address: rings hold no pointers */
    tcm_ring_t *ring = ring_of(sh);
    for (uint32_t v = 0; v < VALUES; v++) {
        while (!tcm__ring_push(ring, RING_CAP, v))
            tcm__yield(); /* full: the consumer is behind */
        tcm__bell_ring(&sh->sleeping, &sh->bell);
    }
}

static void ring_two_processes(void)
{
    make_name("ring");
    CHECK_LE(sizeof(tcm_ring_t) + RING_CAP * sizeof(tcm_ring_cell_t), sizeof ((shared_t *)0)->ring_space);
    tcm_handle_t fd;
    shared_t *sh = create_shared(&fd, NULL);
    tcm_ring_t *ring = ring_of(sh);
    tcm__ring_init(ring, RING_CAP);
    tt_proc_t p;
    CHECK_EQ(tt_spawn_self("producer", seg_name, &p), 0);
    uint64_t tail = 0, sleeps = 0;
    uint32_t expect = 0;
    while (expect < VALUES) {
        uint32_t v;
        if (tcm__ring_peek(ring, RING_CAP, tail, &v)) { /* as the heap thread serves a cell: read, then release */
            tcm__ring_release(ring, RING_CAP, tail++);
            CHECK_EQ(v, expect); /* every value once, in order */
            expect++;
            continue;
        }
        /* the heap thread's sleep: woken late (or never) fails */
        uint32_t seq = atomic_load(&sh->bell.seq);
        atomic_store(&sh->sleeping, 1);
        atomic_thread_fence(memory_order_seq_cst);
        if (!tcm__ring_ready(ring, RING_CAP, tail)) {
            uint64_t t0 = tcm__now_ns();
            tcm__wait(&sh->bell.seq, seq, 10000000000ll);
            CHECK_LT(tcm__now_ns() - t0, 5000000000ull);
            sleeps++;
        }
        atomic_store(&sh->sleeping, 0);
    }
    bool timed_out;
    CHECK_EQ(tt_proc_wait(p, 60000, &timed_out), 0);
    uint32_t v;
    CHECK(!tcm__ring_peek(ring, RING_CAP, tail, &v));
    printf("ring: %u values from another process, %llu sleeps\n", expect, (unsigned long long)sleeps);
    tcm__unmap(sh, SEG_SIZE);
    tcm__close(fd);
    tcm__shm_unlink(seg_name);
}

/* Ping-pong: each side waits on its own word for its turn, with a timeout
 * that only a lost wakeup can reach, then hands the turn over on the other
 * side's word and wakes it. A word has one waiter, and never its waker: the
 * contract of prim.h's wait (a Windows event would let a waker that waits
 * next on the same word take its own wake). */
static void pong(_Atomic uint32_t *mine, _Atomic uint32_t *theirs, uint32_t lead)
{
    for (uint32_t i = 1; i <= PINGS; i++) {
        uint64_t t0 = tcm__now_ns();
        uint32_t v;
        while ((v = atomic_load(mine)) < i) {
            CHECK_LT(tcm__now_ns() - t0, 5000000000ull);
            tcm__wait(mine, v, 10000000000ll);
        }
        atomic_store(theirs, i + lead);
        tcm__wake(theirs, 1);
    }
}

static void child_pong(void)
{
    shared_t *sh = open_shared(NULL, true);
    pong(&sh->pong, &sh->ping, 1);
}

static void no_lost_wakeup(void)
{
    make_name("ping");
    tcm_handle_t fd;
    shared_t *sh = create_shared(&fd, NULL);
    atomic_store(&sh->ping, 1);
    tt_proc_t p;
    CHECK_EQ(tt_spawn_self("pong", seg_name, &p), 0);
    uint64_t t0 = tcm__now_ns();
    pong(&sh->ping, &sh->pong, 0);
    bool timed_out;
    CHECK_EQ(tt_proc_wait(p, 60000, &timed_out), 0);
    printf("wakeups: %d round trips between processes, %.1f us each\n", PINGS,
           (double)(tcm__now_ns() - t0) / PINGS / 1e3);
    /* thousands of words (tcmd wakes every client thread's slots): each
     * gets its own wakeup object on Windows, none is refused */
    _Atomic uint32_t *many = (_Atomic uint32_t *)((char *)sh + 8 * MiB);
    CHECK_EQ(tcm__commit(fd, 8 * MiB, 64 * 1024), 0);
    for (int i = 0; i < 5000; i++) {
        atomic_store(&many[i], 1);
        tcm__wake(&many[i], 1);
        CHECK_NE(tcm__wait(&many[i], 0, 1000000000ll), -ETIMEDOUT);
    }
    /* a wait on a word that no longer holds the value returns at once */
    uint64_t t1 = tcm__now_ns();
    CHECK_NE(tcm__wait(&sh->ping, 12345, 2000000000ll), 0);
    CHECK_LT(tcm__now_ns() - t1, 1000000000ull);
    /* and one nobody wakes times out (on Windows after at most one early
     * return: the last wake may have found nobody asleep and left its event
     * set, a spurious wakeup the futex contract allows) */
    uint32_t now = atomic_load(&sh->ping);
    t1 = tcm__now_ns();
    int rc = tcm__wait(&sh->ping, now, 50000000);
    if (rc != -ETIMEDOUT) {
        t1 = tcm__now_ns();
        rc = tcm__wait(&sh->ping, now, 50000000);
    }
    CHECK_EQ(rc, -ETIMEDOUT);
    CHECK_GE(tcm__now_ns() - t1, 40000000ull);
    tcm__unmap(sh, SEG_SIZE);
    tcm__close(fd);
    tcm__shm_unlink(seg_name);
}

static void name_lock(void)
{
    make_name("lock");
    tcm_handle_t l = tcm__lock_name(seg_name);
    CHECK_GE(l, 0);
    CHECK_EQ(run_child("lock"), 0); /* another process is refused while we hold it */
    tcm__close(l);
    CHECK_EQ(run_child("lock-free"), 0); /* and gets it once we let go */
    tcm__shm_unlink(seg_name);
}

static void child_lock(bool expect_free)
{
    tcm_handle_t l = tcm__lock_name(tt_role_arg());
    if (expect_free)
        CHECK_GE(l, 0);
    else
        CHECK_EQ(l, -EBUSY);
}

/* The control channel's transport: a client connects with tcm__connect,
 * the server learns who it is from the channel, frames go both ways, and
 * the server sees the client go. The server side is tcmd's libuv loop in
 * the daemon; here it is the OS's own calls. */
static char channel_path[100]; /* fits a sun_path */

static tcm_handle_t channel_listen(void)
{
#ifdef _WIN32
    snprintf(channel_path, sizeof channel_path, "\\\\.\\pipe\\tcm-test-shm-%u", (unsigned)tcm__pid());
    HANDLE h = CreateNamedPipeA(channel_path, PIPE_ACCESS_DUPLEX, PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT, 1,
                                4096, 4096, 0, NULL);
    CHECK(h != INVALID_HANDLE_VALUE);
    return HandleToLong(h);
#else
    snprintf(channel_path, sizeof channel_path, "/tmp/tcm-test-shm-%u.sock", (unsigned)tcm__pid());
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", channel_path);
    unlink(channel_path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK_GE(fd, 0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    CHECK_EQ(listen(fd, 1), 0);
    return fd;
#endif
}

static tcm_handle_t channel_accept(tcm_handle_t listener)
{
#ifdef _WIN32
    HANDLE h = LongToHandle(listener);
    CHECK(ConnectNamedPipe(h, NULL) || GetLastError() == ERROR_PIPE_CONNECTED);
    return listener;
#else
    int fd = accept(listener, NULL, NULL);
    CHECK_GE(fd, 0);
    return fd;
#endif
}

static void child_peer(void)
{
    tcm_handle_t fd = tcm__connect(tt_role_arg());
    CHECK_GE(fd, 0);
    uint32_t pid = tcm__pid();
    CHECK_EQ(tcm__send_all(fd, &pid, sizeof pid), 0);
    char reply[3];
    CHECK_EQ(tcm__recv_all(fd, reply, sizeof reply, 10000, NULL, 0, NULL), 0);
    CHECK(memcmp(reply, "bye", 3) == 0);
    /* nothing more comes: a read with a timeout says so */
    CHECK_EQ(tcm__recv_all(fd, reply, 1, 50, NULL, 0, NULL), -ETIMEDOUT);
    tcm__close(fd);
}

static void control_channel(void)
{
    tcm_handle_t listener = channel_listen();
    CHECK_LT(tcm__connect("/tmp/tcm-test-shm-nobody-serves-this"), 0);
    tt_proc_t p;
    CHECK_EQ(tt_spawn_self("peer", channel_path, &p), 0);
    tcm_handle_t conn = channel_accept(listener);
    uint32_t child_pid = 0;
    CHECK_EQ(tcm__recv_all(conn, &child_pid, sizeof child_pid, 10000, NULL, 0, NULL), 0);
    tcm_pid_t pid = 0;
    tcm_uid_t uid = 0;
    tcm_gid_t gid = 0;
    CHECK_EQ(tcm__peer_cred(conn, &pid, &uid, &gid), 0);
    CHECK_EQ((uint32_t)pid, child_pid); /* who is at the other end, from the channel itself */
    CHECK_EQ(uid, tcm__uid());
    CHECK(tcm__peer_in_group(conn, gid, gid));
    CHECK(!tcm__socket_hung_up(conn));
    CHECK_EQ(tcm__send_all(conn, "bye", 3), 0);
    bool timed_out;
    CHECK_EQ(tt_proc_wait(p, 30000, &timed_out), 0);
    CHECK(tcm__socket_hung_up(conn)); /* the client has gone */
    char c;
    CHECK_EQ(tcm__recv_all(conn, &c, 1, 1000, NULL, 0, NULL), -ECONNRESET);
    tcm__close(conn);
#ifndef _WIN32
    tcm__close(listener);
    unlink(channel_path);
#endif
}

int main(void)
{
    const char *role = tt_role();
    if (role && strcmp(role, "case") != 0) {
        if (strcmp(role, "same-address") == 0)
            child_same_address();
        else if (strcmp(role, "producer") == 0)
            child_producer();
        else if (strcmp(role, "pong") == 0)
            child_pong();
        else if (strcmp(role, "peer") == 0)
            child_peer();
        else if (strcmp(role, "lock") == 0 || strcmp(role, "lock-free") == 0)
            child_lock(strcmp(role, "lock-free") == 0);
        else
            CHECK(!"unknown role");
        return 0;
    }
    static const tt_case_t cases[] = {
        {"a segment at the same address in two processes", same_address},
        {"commit and release, measured", commit_release},
        {"the ring between two processes", ring_two_processes},
        {"no lost wakeup between processes", no_lost_wakeup},
        {"one holder of a name", name_lock},
        {"the control channel: who is at the other end", control_channel},
    };
    return tt_run_cases("shm", cases, sizeof cases / sizeof cases[0], 120000) ? 1 : 0;
}
