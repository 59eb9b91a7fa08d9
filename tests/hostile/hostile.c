/* hostile.c — tcm-hostile MODE: an attached process that does to what it
 * holds (its descriptors, its channel's pages, its socket) what a careless
 * or hostile program would, so that tests can show it costs that process
 * and nobody else. It attaches through libtcm (TCM_SOCKET), prints "ready"
 * on stdout once the attack is in place, and then follows the mode; lines
 * on stdin drive the modes that wait ("go", "exit").
 *
 *   close-fds   free 1000 objects of 64 B into its cache, close every
 *               descriptor above 2 (close_range), open a pipe that takes
 *               the socket's number, then at "go" allocate 1000 objects of
 *               64 B and print their addresses; at "exit" check that libtcm
 *               wrote nothing into the pipe, tcm_shutdown, exit 0
 *   truncate    shrink its channel to 0 bytes, then wait for "exit"
 *   grow        grow its channel to 16 times its size, then wait
 *   punch       punch a hole over its whole channel, then wait
 *   garbage     write garbage and maximum values into every field of its
 *               channel a client may write (header, transfer tier, page-run
 *               cache, thread caches, slots, ring), then wait
 *   push-dead   fork a child that maps the channel and pushes ring cells
 *               for SECONDS (argv[2], default 3) while this process exits
 *               at once: its client is dead while its ring keeps filling
 *   churn-closed close its descriptors, then allocate and free across size
 *               classes (refills and returns through tcmd) for SECONDS
 *   roots       set roots with new names in a loop for SECONDS (its user's
 *               share fills; every later set is answered EDQUOT)
 *   hold        an ordinary client with objects in its caches and none in
 *               use: waits for "exit" (a chaos run SIGKILLs it first)
 *   flood-stats send stats requests for SECONDS and never read a reply
 *               (a connection tcmd closes is replaced by a new one)
 *   conns       open N (argv[2]) control connections, wait for "exit"
 *   hello-again  attach, then send a Hello of its own on a new connection;
 *               print tcmd's answer (the error's text, or "welcome")
 *   flood-resume send resume requests for clients it is not, with made-up
 *               tokens, each on a new connection, for SECONDS
 * The last three are peers, not clients: they speak the control protocol
 * on $TCM_SOCKET without attaching.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "frame.h"
#include "prim.h"
#include "ring.h"
#include "tcm.h"
#include "tcm_layout.h"

static void die(const char *what)
{
    fprintf(stderr, "tcm-hostile: %s: %s\n", what, strerror(errno));
    exit(2);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void say(const char *line)
{
    printf("%s\n", line);
    fflush(stdout);
}

/* Block until a line equal to want arrives on stdin (EOF: exit). */
static void await_line(const char *want)
{
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (strcmp(line, want) == 0)
            return;
    }
    exit(0);
}

/* Its channel, as libtcm mapped it: the mapping of /dev/shm/tcm.*.ch.* */
static void find_channel(char *path, size_t len, uint8_t **at, uint64_t *size)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    if (!f)
        die("/proc/self/maps");
    while (fgets(line, sizeof line, f)) {
        char *p = strstr(line, "/dev/shm/tcm.");
        if (!p || !strstr(p, ".ch."))
            continue;
        unsigned long lo, hi;
        sscanf(line, "%lx-%lx", &lo, &hi);
        p[strcspn(p, "\n")] = 0;
        snprintf(path, len, "%s", p);
        *at = (uint8_t *)lo;
        *size = hi - lo;
        fclose(f);
        return;
    }
    fprintf(stderr, "tcm-hostile: no channel mapped\n");
    exit(2);
}

static int open_channel(uint8_t **at, uint64_t *size)
{
    char path[256];
    find_channel(path, sizeof path, at, size);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        die(path);
    return fd;
}

static void close_fds(void)
{
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
        for (int fd = 3; fd < 1024; fd++)
            close(fd);
}

/* Attach, and make it hold a thread cache and a transfer tier with objects
 * of SIZE bytes in them, as any busy process does. */
static void warm_up_with(size_t size)
{
    if (tcm_init(NULL) != 0) {
        fprintf(stderr, "tcm-hostile: cannot attach\n");
        exit(2);
    }
    void *p[1000];
    for (int i = 0; i < 1000; i++)
        if (!(p[i] = tcm_malloc(size)))
            die("tcm_malloc");
    for (int i = 0; i < 1000; i++)
        tcm_free(p[i]);
}

static void warm_up(void)
{
    warm_up_with(64);
}

static int close_fds_mode(void)
{
    warm_up();
    close_fds();
    int pipefd[2];
    if (pipe(pipefd) != 0) /* takes the numbers the socket and others had */
        die("pipe");
    fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
    say("ready");
    await_line("go");
    static void *p[1000];
    for (int i = 0; i < 1000; i++) {
        if (!(p[i] = tcm_malloc(64)))
            die("tcm_malloc after closing descriptors");
        printf("%p\n", p[i]);
    }
    say("done");
    await_line("exit");
    for (int i = 0; i < 1000; i++)
        tcm_free(p[i]);
    void *big = tcm_malloc(1 << 20); /* a slow path that needs tcmd */
    if (!big)
        die("tcm_malloc(1 MiB) after closing descriptors");
    tcm_free(big);
    tcm_shutdown();
    char c;
    if (read(pipefd[0], &c, 1) == 1) {
        fprintf(stderr, "tcm-hostile: libtcm wrote into a descriptor the application owns\n");
        return 1;
    }
    return 0;
}

static int resize_mode(const char *mode)
{
    warm_up();
    uint8_t *at;
    uint64_t size;
    int fd = open_channel(&at, &size);
    int rc = strcmp(mode, "truncate") == 0 ? ftruncate(fd, 0)
             : strcmp(mode, "grow") == 0   ? ftruncate(fd, (off_t)size * 16)
                                           : fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)size);
    if (rc != 0)
        die(mode);
    say("ready");
    await_line("exit");
    return 0;
}

#define GARBAGE_CLASS_BYTES 1024

/* Client-writable fields, filled with garbage and maximum values. Only the
 * first caches' pages are written (writing all of them would cost this
 * process a channel of tmpfs); the counts claim every one of them. */
static int garbage_mode(void)
{
    /* Counts past an array's entries make its reclaim free what the entries
     * behind them still name: objects that were this client's and since went
     * back to tcmd, or to whichever process allocated them next. That is a
     * free of another process's object through its pointer, which a shared
     * heap allows (DESIGN, "What a client can still do"); the objects here
     * are of a class the tests' bystanders never use, so what such a free
     * hits is nobody's but this client's. */
    warm_up_with(GARBAGE_CLASS_BYTES);
    uint8_t *at;
    uint64_t size;
    open_channel(&at, &size);
    tcm_chan_hdr_t *hdr = (tcm_chan_hdr_t *)at;
    tcm_chan_layout_t l = {0};
    l.nslots = hdr->nslots;
    l.ring_cap = hdr->ring_cap;
    l.max_threads = hdr->max_threads;
    uint64_t off_tcaches = hdr->off_tcaches, stride = hdr->tcache_stride;
    uint64_t off_slots = hdr->off_slots, off_ring = hdr->off_ring;
    srand(42);
    for (unsigned c = 0; c < TCM_NCLASSES; c++)
        hdr->xfer[c].count = UINT32_MAX;
    hdr->large_count = UINT32_MAX;
    for (unsigned i = 0; i < TCM_LARGE_CACHE; i++)
        hdr->large[i] = (tcm_large_entry_t){.off = ((uint64_t)rand() << 20) ^ (uint64_t)rand(), .npages = UINT32_MAX};
    atomic_store(&hdr->tcache_hw, UINT32_MAX);
    atomic_store(&hdr->flush_ack, UINT32_MAX);
    for (unsigned t = 0; t < 2; t++) {
        tcm_tcache_t *tc = (tcm_tcache_t *)(at + off_tcaches + t * stride);
        tc->in_use = UINT32_MAX;
        tc->ahead_bytes = UINT64_MAX;
        atomic_store(&tc->dropped, UINT32_MAX);
        for (unsigned c = 0; c < TCM_NBINS; c++)
            tc->bins[c] = (tcm_bin_t){.objs = (void **)(uintptr_t)rand(), .count = UINT32_MAX, .max = UINT32_MAX};
        uint64_t *arr = (uint64_t *)(tc->bins + TCM_NBINS);
        for (unsigned i = 0; i < 4096; i++)
            arr[i] = ((uint64_t)rand() << 32) ^ (uint64_t)rand();
    }
    for (unsigned s = 0; s < 8 && s < l.nslots; s++) {
        tcm_slot_t *slot = (tcm_slot_t *)(at + off_slots) + s;
        slot->op = (uint32_t)rand();
        slot->cls = UINT32_MAX;
        slot->count = UINT32_MAX;
        slot->arg = UINT64_MAX;
        for (unsigned i = 0; i < TCM_MAX_BATCH; i++)
            slot->offs[i] = ((uint64_t)rand() << 32) ^ (uint64_t)rand();
    }
    tcm_ring_t *ring = (tcm_ring_t *)(at + off_ring);
    for (unsigned i = 0; i < 64 && i < l.ring_cap; i++) {
        atomic_store(&ring->cells[i].seq, (uint64_t)rand());
        ring->cells[i].slot = (uint32_t)rand();
    }
    say("ready");
    await_line("exit");
    _exit(0); /* no exit handlers: libtcm would read its own garbage */
}

/* The child keeps the dead client's ring full of requests naming a slot
 * that says NOP; the client dies once the child is pushing, so that tcmd
 * finds the ring refilling while it reaps. */
static int push_dead_mode(double seconds)
{
    warm_up();
    uint8_t *at;
    uint64_t size;
    int fd = open_channel(&at, &size);
    tcm_chan_hdr_t *hdr = (tcm_chan_hdr_t *)at;
    uint32_t cap = hdr->ring_cap, spare = hdr->max_threads;
    uint64_t off_ring = hdr->off_ring, off_slots = hdr->off_slots;
    int pushing[2];
    if (pipe(pushing) != 0)
        die("pipe");
    pid_t child = fork();
    if (child < 0)
        die("fork");
    if (child == 0) {
        uint8_t *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            _exit(2);
        tcm_ring_t *ring = (tcm_ring_t *)(m + off_ring);
        tcm_slot_t *slot = (tcm_slot_t *)(m + off_slots) + spare;
        say("ready");
        double end = now_s() + seconds;
        for (unsigned long n = 0; now_s() < end; n++) {
            slot->op = TCM_OP_NOP;
            atomic_store(&slot->state, TCM_SLOT_POSTED);
            if (!tcm__ring_push(ring, cap, spare))
                sched_yield();
            if (n == 10000 && write(pushing[1], "p", 1) != 1)
                _exit(2);
        }
        _exit(0);
    }
    char c;
    if (read(pushing[0], &c, 1) != 1)
        die("the pushing child");
    _exit(0); /* the client dies now, its ring full; its child goes on pushing */
}

static int churn_closed_mode(double seconds)
{
    warm_up();
    close_fds();
    say("ready");
    static void *p[4096];
    double end = now_s() + seconds;
    unsigned long rounds = 0;
    while (now_s() < end) {
        size_t size = (size_t)16 << (rounds % 12);
        unsigned n = (unsigned)(sizeof p / sizeof p[0]) >> (rounds % 12 / 2);
        for (unsigned i = 0; i < n; i++)
            if (!(p[i] = tcm_malloc(size)))
                die("tcm_malloc while churning");
        for (unsigned i = 0; i < n; i++)
            tcm_free(p[i]);
        rounds++;
    }
    printf("rounds %lu\n", rounds);
    return 0;
}

static int roots_mode(double seconds)
{
    warm_up();
    void *obj = tcm_malloc(64);
    say("ready");
    double end = now_s() + seconds;
    unsigned long i = 0, set = 0;
    while (now_s() < end) {
        char name[32];
        snprintf(name, sizeof name, "hostile-%lu", i++);
        set += tcm_root_set(name, obj) == 0;
    }
    printf("roots %lu of %lu\n", set, i);
    return 0;
}

static int peer(void)
{
    int fd = tcm__connect(getenv("TCM_SOCKET"));
    if (fd < 0) {
        errno = -fd;
        die("connect");
    }
    return fd;
}

static int flood_stats_mode(double seconds)
{
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__StatsRequest sr = TCM__STATS_REQUEST__INIT;
    req.version = TCM_PROTO_VERSION;
    req.body_case = TCM__REQUEST__BODY_STATS;
    req.stats = &sr;
    size_t len;
    uint8_t *frame = tcm__frame_pack(&req.base, &len);
    int fd = peer();
    fcntl(fd, F_SETFL, O_NONBLOCK);
    say("ready");
    unsigned long sent = 0, closed = 0;
    double end = now_s() + seconds;
    while (now_s() < end) {
        ssize_t n = send(fd, frame, len, MSG_NOSIGNAL);
        if (n == (ssize_t)len) {
            sent++;
            continue;
        }
        if (n < 0 && errno == EAGAIN) { /* tcmd stopped reading us: wait, never read */
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            poll(&p, 1, 10);
            continue;
        }
        close(fd); /* closed by tcmd (or a partial frame): start again */
        closed++;
        fd = peer();
        fcntl(fd, F_SETFL, O_NONBLOCK);
    }
    printf("sent %lu, closed %lu\n", sent, closed);
    free(frame);
    return 0;
}

static int conns_mode(int n)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    int opened = 0;
    for (int i = 0; i < n; i++) {
        int fd = tcm__connect(getenv("TCM_SOCKET"));
        opened += fd >= 0;
    }
    fprintf(stderr, "tcm-hostile: %d connections open\n", opened);
    say("ready");
    await_line("exit");
    return 0;
}

static int flood_resume_mode(double seconds)
{
    say("ready");
    unsigned long asked = 0;
    double end = now_s() + seconds;
    while (now_s() < end) {
        int fd = peer();
        Tcm__Request req = TCM__REQUEST__INIT;
        Tcm__Hello hello = TCM__HELLO__INIT;
        hello.version = TCM_PROTO_VERSION;
        hello.resume_client_id = (uint32_t)(rand() % 8 + 1);
        hello.resume_token = ((uint64_t)rand() << 32) ^ (uint64_t)rand();
        req.version = TCM_PROTO_VERSION;
        req.body_case = TCM__REQUEST__BODY_HELLO;
        req.hello = &hello;
        if (tcm__frame_send(fd, &req) == 0)
            asked++;
        close(fd);
    }
    printf("asked %lu\n", asked);
    return 0;
}

/* Already a client through libtcm, it sends a Hello of its own on a new
 * connection: a second client for one process. Prints the answer: the
 * error's text, or "welcome". */
static int hello_again_mode(void)
{
    if (tcm_init(NULL) != 0 || !tcm_malloc(64))
        die("attach");
    int fd = peer();
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__Hello hello = TCM__HELLO__INIT;
    hello.version = TCM_PROTO_VERSION;
    req.version = TCM_PROTO_VERSION;
    req.body_case = TCM__REQUEST__BODY_HELLO;
    req.hello = &hello;
    if (tcm__frame_send(fd, &req) != 0)
        die("send");
    static uint8_t buf[1 << 16];
    size_t len = 0;
    const uint8_t *payload;
    size_t n;
    while (tcm__frame_next(buf, len, &payload, &n) == 0) {
        ssize_t got = recv(fd, buf + len, sizeof buf - len, 0);
        if (got <= 0)
            die("recv");
        len += (size_t)got;
    }
    Tcm__Response *resp = tcm__response__unpack(NULL, n, payload);
    if (!resp)
        die("unpack");
    printf("%s\n", resp->body_case == TCM__RESPONSE__BODY_ERROR ? resp->error->message : "welcome");
    tcm__response__free_unpacked(resp, NULL);
    tcm_shutdown();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tcm-hostile MODE [SECONDS]\n");
        return 2;
    }
    const char *mode = argv[1];
    double seconds = argc > 2 ? atof(argv[2]) : 3.0;
    signal(SIGPIPE, SIG_IGN);
    if (strcmp(mode, "close-fds") == 0)
        return close_fds_mode();
    if (strcmp(mode, "truncate") == 0 || strcmp(mode, "grow") == 0 || strcmp(mode, "punch") == 0)
        return resize_mode(mode);
    if (strcmp(mode, "garbage") == 0)
        return garbage_mode();
    if (strcmp(mode, "push-dead") == 0)
        return push_dead_mode(seconds);
    if (strcmp(mode, "churn-closed") == 0)
        return churn_closed_mode(seconds);
    if (strcmp(mode, "roots") == 0)
        return roots_mode(seconds);
    if (strcmp(mode, "flood-stats") == 0)
        return flood_stats_mode(seconds);
    if (strcmp(mode, "conns") == 0)
        return conns_mode(argc > 2 ? atoi(argv[2]) : 2000);
    if (strcmp(mode, "flood-resume") == 0)
        return flood_resume_mode(seconds);
    if (strcmp(mode, "hello-again") == 0)
        return hello_again_mode();
    if (strcmp(mode, "hold") == 0) {
        warm_up();
        say("ready");
        await_line("exit");
        return 0;
    }
    fprintf(stderr, "tcm-hostile: unknown mode '%s'\n", mode);
    return 2;
}
