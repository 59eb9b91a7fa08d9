/* handlers.c — what tcmd answers on the control socket: the attach
 * handshake (Hello/Welcome, resume after a restart) and one handler per
 * request. Requests the heap thread must run (release, resize, check, the
 * health probe) go through the mailbox and answer when it is done; the
 * connection waits, the loop does not. Main thread only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "clientwatch.h"
#include "config.h"
#include "frame.h"
#include "handlers.h"
#include "heapthread.h"
#include "holders.h"
#include "log.h"
#include "mailbox.h"
#include "prim.h"
#include "quota.h"
#include "rows.h"
#include "samples.h"
#include "segments.h"
#include "stats.h"
#include "transport.h"
#include "util.h"
#include "validate.h"

static int send_welcome(tcm_conn_t *conn, tcm_client_t *c, bool resumed)
{
    tcm_server_t *srv = conn->srv;
    Tcm__Welcome w = TCM__WELCOME__INIT;
    uint32_t sizes[TCM_NCLASSES];
    for (unsigned i = 0; i < TCM_NCLASSES; i++)
        sizes[i] = srv->h.classes[i].size;
    w.version = TCM_PROTO_VERSION;
    w.client_id = c->rec->id;
    w.heap_name = srv->heap_name;
    w.meta_name = srv->meta_name;
    w.channel_name = c->rec->chan_name;
    w.base_address = srv->base;
    w.heap_size = srv->heap_size;
    w.page_shift = TCM_PAGE_SHIFT;
    w.n_class_size = TCM_NCLASSES;
    w.class_size = sizes;
    w.max_threads = srv->max_threads;
    w.daemon_pid = tcm__pid();
    w.token = c->rec->token;
    w.heap_id = srv->meta->heap_id;
    w.resumed = resumed;
    if (resumed) { /* it has its mappings and its channel */
        tcm__conn_reply(conn, TCM__RESPONSE__BODY_WELCOME, &w);
        return 0;
    }
    tcm_handle_t fds[3] = {tcm__shm_open(srv->heap_name, true), tcm__shm_open(srv->meta_name, false),
                  tcm__shm_open(c->rec->chan_name, true)};
    int err = fds[0] < 0 ? fds[0] : fds[1] < 0 ? fds[1] : fds[2] < 0 ? fds[2] : 0;
    if (!err)
        err = tcm__conn_reply_with_fds(conn, TCM__RESPONSE__BODY_WELCOME, &w, fds, 3);
    /* the client keeps the heap's segments and its channel in existence for
     * a later tcmd (Windows: a name goes with its last handle, and libtcm
     * keeps none once it has mapped them); without it the client still
     * works, only a restart may lose the heap */
    tcm_handle_t keep[] = {srv->heap_fd, srv->meta_fd, srv->state_fd, c->chan_fd};
    int kept = 0;
    for (int i = 0; i < 4 && !err && !kept; i++)
        kept = tcm__keep_alive_in(keep[i], c->rec->pid);
    if (kept)
        tcm__log(TCM_LOG_WARN, "client %u (pid %u): cannot leave it the heap's segments: %s", c->rec->id,
                 c->rec->pid, strerror(-kept));
    for (int i = 0; i < 3; i++)
        tcm__close(fds[i]);
    if (err)
        tcm__log(TCM_LOG_WARN, "client %u (pid %u): cannot send its welcome: %s", c->rec->id, c->rec->pid,
                 strerror(-err));
    return err;
}

/* A client takes its record back on a new connection: after a tcmd
 * restart, or because its process lost its connection (it closed the
 * descriptor) while it kept running. Same channel, caches, tag and
 * counters. Only the process it belongs to may, with its token; a
 * connection it still seems to hold is one it has lost track of, and is
 * closed without touching the client. */
static void resume(tcm_conn_t *conn, const Tcm__Hello *hello)
{
    tcm_server_t *srv = conn->srv;
    uint32_t hw = atomic_load(&srv->clients_hw);
    const char *why = "no such client to resume (the heap was replaced, or the client was reclaimed)";
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (!c || c->rec->id != hello->resume_client_id)
            continue;
        uint32_t state = atomic_load(&c->rec->state);
        if ((state != TCM_REC_ACTIVE && state != TCM_REC_EVICTED) || c->rec->token != hello->resume_token ||
            c->rec->pid != (uint32_t)conn->pid)
            break;
        if (c->cut_off || atomic_load(&c->chan_broken)) {
            why = "this client was cut off: its channel was shrunk or punched";
            break;
        }
        if (c->conn) {
            tcm_conn_t *old = c->conn;
            old->client = NULL;
            tcm__conn_close(old);
        }
        c->conn = conn;
        conn->client = c;
        bool after_restart = c->adopted;
        c->adopted = false;
        atomic_store(&((tcm_chan_hdr_t *)c->chan)->resume_wanted, 0);
        if (after_restart)
            TCM_STAT_ADD_MAIN(srv->meta, clients_resumed, 1);
        else
            TCM_STAT_ADD_MAIN(srv->meta, clients_reconnected, 1);
        send_welcome(conn, c, true);
        tcm__log_peer(TCM_LOG_INFO, tcm__log_source_uid(c->rec->uid), "client %u (pid %u) %s", c->rec->id,
                      c->rec->pid, after_restart ? "resumed" : "reconnected");
        return;
    }
    tcm__log_peer(TCM_LOG_WARN, conn->pid, "control: pid %d asked to resume client %u: refused (%s)",
                  (int)conn->pid, hello->resume_client_id, why);
    tcm__conn_error(conn, ESRCH, why);
}

/* The live client of process pid, if any, and how many uid has. */
static tcm_client_t *census(tcm_server_t *srv, tcm_pid_t pid, tcm_uid_t uid, uint32_t *of_uid)
{
    tcm_client_t *same = NULL;
    uint32_t hw = atomic_load(&srv->clients_hw);
    *of_uid = 0;
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = tcm__client_attached(srv, i);
        if (!c)
            continue;
        *of_uid += c->rec->uid == (uint32_t)uid;
        if (c->rec->pid == (uint32_t)pid)
            same = c;
    }
    return same;
}

/* The client a process was has ended: it detached (its Bye may still be
 * on the way), or exec replaced the image that attached. */
static void end_previous(tcm_client_t *c, bool detached)
{
    if (detached)
        atomic_store(&c->rec->said_bye, 1);
    if (c->conn) {
        tcm_conn_t *old = c->conn;
        c->conn = NULL;
        old->client = NULL;
        tcm__conn_close(old);
    }
    tcm__client_gone(c->srv, c);
}

/* One client per process. A process that already is one may attach again
 * once it has detached from it (its Hello names the client it left), or
 * once the image that attached is gone (exec replaced it: its channel is
 * no longer mapped there); that client then ends as if its process had
 * (its caches reclaimed, what it held a departed holder's). 0 to go on,
 * or an error answered. */
static int one_per_process(tcm_conn_t *conn, const Tcm__Hello *hello, tcm_client_t *same)
{
    if (!tcm__client_alive(same)) { /* its process ended (the pid is another's now) */
        tcm__client_gone(conn->srv, same);
        return 0;
    }
    if (hello->left_client_id == same->rec->id && hello->left_token == same->rec->token) {
        end_previous(same, true);
        return 0;
    }
    int mapped = tcm__proc_maps_shm(conn->pid, same->rec->chan_name);
    if (mapped == 0) {
        tcm__log_peer(TCM_LOG_INFO, tcm__log_source_uid(same->rec->uid),
                      "client %u (pid %u): its process attaches again after exec; the client it was has ended",
                      same->rec->id, same->rec->pid);
        end_previous(same, false);
        return 0;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "pid %d is client %u already: one client per process%s", (int)conn->pid,
             same->rec->id, mapped < 0 ? " (tcmd cannot tell from its mappings whether it exec'd)" : "");
    tcm__conn_error(conn, EEXIST, msg);
    return -EEXIST;
}

static void handle_hello(tcm_conn_t *conn, const Tcm__Hello *hello)
{
    tcm_server_t *srv = conn->srv;
    if (!tcm__conn_may_attach(conn))
        return;
    if (conn->client) {
        tcm__conn_error(conn, EALREADY, "already attached on this connection");
        return;
    }
    if (hello->version != TCM_PROTO_VERSION) {
        char msg[96];
        snprintf(msg, sizeof msg, "protocol version %u not supported (daemon speaks %u)",
                 hello->version, TCM_PROTO_VERSION);
        tcm__conn_error(conn, EPROTONOSUPPORT, msg);
        return;
    }
    if (hello->resume_client_id) {
        resume(conn, hello);
        return;
    }
    uint32_t of_uid;
    tcm_client_t *same = census(srv, conn->pid, conn->uid, &of_uid);
    if (same && one_per_process(conn, hello, same) != 0)
        return;
    if (of_uid - (same != NULL) >= srv->clients_per_uid) {
        char msg[128];
        snprintf(msg, sizeof msg, "uid %u has %u clients attached, its share (clients_per_uid)", (unsigned)conn->uid,
                 of_uid);
        tcm__log_peer(TCM_LOG_WARN, tcm__log_source_uid(conn->uid), "control: pid %d refused: %s", (int)conn->pid,
                      msg);
        tcm__conn_error(conn, EMFILE, msg);
        return;
    }
    tcm_handle_t sock = -1;
    tcm__conn_os_handle(conn, &sock);
    tcm_client_t *c;
    int err = tcm__client_create(srv, sock, conn->pid, conn->uid, &c);
    if (err) {
        tcm__conn_error(conn, (uint32_t)-err, err == -EMFILE   ? "too many clients"
                                              : err == -ESRCH ? "the process that connected has ended"
                                                              : strerror(-err));
        return;
    }
    c->conn = conn;
    conn->client = c;
    tcm__client_watch(srv, c);
    if (send_welcome(conn, c, false) != 0) {
        /* it never learned it is a client, so it will never resume: gone
         * now (it has nothing), not kept for as long as its process runs */
        c->conn = NULL;
        conn->client = NULL;
        tcm__client_gone(srv, c);
        tcm__conn_close(conn);
        return;
    }
    tcm__log_peer(TCM_LOG_INFO, tcm__log_source_uid(c->rec->uid), "client %u attached: pid %u (%s) uid %u",
                  c->rec->id, c->rec->pid, c->comm, c->rec->uid);
}

static void handle_ping(tcm_conn_t *conn, const Tcm__Ping *ping)
{
    Tcm__Pong pong = TCM__PONG__INIT;
    pong.nonce = ping->nonce;
    pong.version = TCM_PROTO_VERSION;
    pong.daemon_pid = tcm__pid();
    pong.uptime_ms = (tcm__now_ns() - conn->srv->start_ns) / 1000000;
    pong.daemon_version = TCM_VERSION_STRING;
    tcm__conn_reply(conn, TCM__RESPONSE__BODY_PONG, &pong);
}

/* The stats and clients views read every client's caches from its
 * channel: cheap for an ordinary client, megabytes for one whose channel
 * claims a thousand thread caches. So they are made on libuv's thread
 * pool, and the main loop (pings, attaches, other peers) never waits for
 * them; the asking connection waits for its answer, as for the heap
 * thread's commands. At most one of each kind is made at a time, for
 * every connection that asked before it began; those that ask meanwhile
 * get the next one: however many peers ask, two views run at most, and
 * an answer is never older than its question. */
typedef struct view_job {
    uv_work_t work;
    tcm_server_t *srv;
    enum tcm_view_kind kind;     /* TCM_VIEW_STATS or TCM_VIEW_CLIENTS */
    tcm_conn_t *askers;          /* its answer's connections (view_next) */
    size_t n;
    tcm_stat_row_t rows[TCM_MAX_STAT_ROWS];
    Tcm__ClientInfo *crows;      /* [srv->max_clients] */
} view_job_t;

static void make_view(uv_work_t *w)
{
    view_job_t *j = w->data;
    j->n = j->kind == TCM_VIEW_CLIENTS ? tcm__clients_view(j->srv, j->crows)
                                       : tcm__stats_snapshot(j->srv, j->rows, TCM_MAX_STAT_ROWS);
}

static void reply_stats(tcm_conn_t *conn, const tcm_stat_row_t *rows, size_t n)
{
    tcm_server_t *srv = conn->srv;
    Tcm__Stat st[TCM_MAX_STAT_ROWS], *stp[TCM_MAX_STAT_ROWS];
    for (size_t i = 0; i < n; i++) {
        tcm__stat__init(&st[i]);
        st[i].name = (char *)rows[i].name;
        st[i].help = (char *)rows[i].help;
        st[i].value = rows[i].value;
        st[i].fvalue = rows[i].fvalue;
        st[i].is_float = rows[i].is_float;
        st[i].counter = rows[i].counter;
        stp[i] = &st[i];
    }
    double upper[TCM_LAT_BUCKETS];
    uint64_t count[TCM_LAT_BUCKETS];
    for (unsigned i = 0; i < TCM_LAT_BUCKETS; i++) {
        upper[i] = tcm__latency_upper_us(i);
        count[i] = atomic_load(&srv->dstats->latency[i]);
    }
    Tcm__Histogram hist = TCM__HISTOGRAM__INIT;
    hist.n_upper_us = hist.n_count = TCM_LAT_BUCKETS;
    hist.upper_us = upper;
    hist.count = count;
    hist.sum_ns = atomic_load(&srv->dstats->latency_sum_ns);
    Tcm__Stats stats = TCM__STATS__INIT;
    stats.n_stat = n;
    stats.stat = stp;
    stats.service_time = &hist;
    tcm__conn_reply(conn, TCM__RESPONSE__BODY_STATS, &stats);
}

static void reply_clients(tcm_conn_t *conn, Tcm__ClientInfo *rows, size_t n)
{
    Tcm__ClientInfo **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    if (!ptrs) {
        tcm__conn_error(conn, ENOMEM, "out of memory");
        return;
    }
    Tcm__Clients clients = TCM__CLIENTS__INIT;
    clients.n_client = n;
    for (size_t i = 0; i < n; i++)
        ptrs[i] = &rows[i];
    clients.client = ptrs;
    tcm__conn_reply(conn, TCM__RESPONSE__BODY_CLIENTS, &clients);
    free(ptrs);
}

static void view_made(uv_work_t *w, int status);

/* Starts the view of kind for every connection waiting for the next one. */
static void start_view(tcm_server_t *srv, enum tcm_view_kind kind)
{
    if (!srv->view_waiting[kind] || !tcm__view_begin(srv, kind))
        return;
    view_job_t *j = calloc(1, sizeof *j);
    if (j && kind == TCM_VIEW_CLIENTS && !(j->crows = calloc(srv->max_clients, sizeof *j->crows))) {
        free(j);
        j = NULL;
    }
    if (j) {
        j->srv = srv;
        j->kind = kind;
        j->askers = srv->view_waiting[kind];
        j->work.data = j;
        srv->view_waiting[kind] = NULL;
    }
    if (!j || uv_queue_work(srv->loop, &j->work, make_view, view_made) != 0) {
        tcm_conn_t *askers = j ? j->askers : srv->view_waiting[kind];
        srv->view_waiting[kind] = NULL;
        if (j)
            free(j->crows);
        free(j);
        tcm__view_end(srv, kind);
        for (tcm_conn_t *c = askers, *next; c; c = next) {
            next = c->view_next;
            tcm__conn_error(c, ENOMEM, "cannot make the view now");
            tcm__conn_resume(c);
        }
    }
}

static void view_made(uv_work_t *w, int status)
{
    view_job_t *j = w->data;
    tcm_server_t *srv = j->srv;
    tcm__view_end(srv, j->kind);
    for (tcm_conn_t *c = j->askers, *next; c; c = next) {
        next = c->view_next;
        if (status != 0)
            tcm__conn_error(c, ECANCELED, "tcmd is shutting down");
        else if (j->kind == TCM_VIEW_CLIENTS)
            reply_clients(c, j->crows, j->n);
        else
            reply_stats(c, j->rows, j->n);
        tcm__conn_resume(c); /* (frees it if it closed meanwhile) */
    }
    free(j->crows);
    free(j);
    start_view(srv, TCM_VIEW_STATS);
    start_view(srv, TCM_VIEW_CLIENTS);
}

static void ask_view(tcm_conn_t *conn, enum tcm_view_kind kind)
{
    tcm_server_t *srv = conn->srv;
    conn->view_next = srv->view_waiting[kind];
    srv->view_waiting[kind] = conn;
    tcm__conn_wait(conn);
    start_view(srv, kind);
}

static void handle_stats(tcm_conn_t *conn)
{
    ask_view(conn, TCM_VIEW_STATS);
}

static void handle_clients(tcm_conn_t *conn)
{
    ask_view(conn, TCM_VIEW_CLIENTS);
}

#define DEPARTED_ROWS_MAX 300 /* rows of a departed reply: under TCM_FRAME_MAX with the longest names */

static void handle_departed(tcm_conn_t *conn, const Tcm__DepartedRequest *dr)
{
    tcm_holder_row_t *rows = malloc((TCM_HOLDERS + TCM_HOLDER_GROUPS) * sizeof *rows);
    Tcm__DepartedHolder *out = calloc(DEPARTED_ROWS_MAX, sizeof *out);
    Tcm__DepartedHolder **ptrs = calloc(DEPARTED_ROWS_MAX, sizeof *ptrs);
    if (!rows || !out || !ptrs) {
        free(rows), free(out), free(ptrs);
        tcm__conn_error(conn, ENOMEM, "out of memory");
        return;
    }
    size_t n = tcm__holders_rows(conn->srv, rows), shown = n;
    if (shown > DEPARTED_ROWS_MAX)
        shown = DEPARTED_ROWS_MAX;
    if (dr->limit && dr->limit < shown)
        shown = dr->limit;
    Tcm__Departed d = TCM__DEPARTED__INIT;
    for (size_t i = 0; i < n; i++)
        d.bytes_held += rows[i].bytes;
    for (size_t i = 0; i < shown; i++) {
        const tcm_holder_t *e = &rows[i].e;
        tcm__departed_holder__init(&out[i]);
        out[i].group = atomic_load(&e->state) == TCM_HOLDER_GROUP;
        out[i].client_id = e->id;
        out[i].pid = e->pid;
        out[i].uid = e->uid;
        out[i].processes = e->processes;
        out[i].bytes_held = rows[i].bytes;
        out[i].departed_unix = e->departed_unix;
        out[i].name = rows[i].e.comm;
        out[i].exe = rows[i].e.exe;
        ptrs[i] = &out[i];
    }
    d.holders = (uint32_t)n;
    d.n_holder = shown;
    d.holder = ptrs;
    tcm__conn_reply(conn, TCM__RESPONSE__BODY_DEPARTED, &d);
    free(rows), free(out), free(ptrs);
}

/* A page of the heap profile: samples or process records from `from` on,
 * read from the state segment as the heap thread writes it (a consistent
 * copy of each, tcm__sample_read), within the frame and a bounded number
 * of entries looked at (work per request). */
#define PROFILE_PAGE_BYTES (TCM_FRAME_MAX - 4096u)
#define PROFILE_LOOK_MAX 4096u

static uint32_t profile_samples(tcm_server_t *srv, uint32_t pid, uint32_t from, Tcm__HeapProfile *hp,
                                Tcm__ProfileSample *out, Tcm__ProfileSample **ptrs, uint64_t (*frames)[TCM_SAMPLE_FRAMES])
{
    const tcm_samples_t *s = &srv->h.samples;
    uint32_t hw = atomic_load_explicit(&s->hdr->samples_hw, memory_order_acquire), i = from, bytes = 0;
    for (; i < hw && i - from < PROFILE_LOOK_MAX && bytes < PROFILE_PAGE_BYTES; i++) {
        tcm_sample_t e;
        if (!tcm__sample_read(s, i, &e) || e.proc >= TCM_SAMPLE_PROCS ||
            (pid && s->procs[e.proc].pid != pid))
            continue;
        size_t k = hp->n_sample++;
        tcm__profile_sample__init(&out[k]);
        out[k].proc = e.proc;
        out[k].size = e.size;
        out[k].interval = e.interval;
        out[k].born_unix = e.born_unix;
        memcpy(frames[k], e.frames, e.nframes * sizeof e.frames[0]);
        out[k].n_frame = e.nframes;
        out[k].frame = frames[k];
        ptrs[k] = &out[k];
        bytes += 32 + 10 * e.nframes;
    }
    return i < hw ? i : 0;
}

static uint32_t profile_procs(tcm_server_t *srv, uint32_t from, Tcm__HeapProfile *hp, Tcm__ProfileProc *out,
                              Tcm__ProfileProc **ptrs, tcm_sample_proc_t *recs, char (*maps)[TCM_SAMPLE_MAPS_BYTES + 1])
{
    const tcm_samples_t *s = &srv->h.samples;
    uint32_t hw = atomic_load_explicit(&s->hdr->procs_hw, memory_order_acquire), i = from, bytes = 0;
    for (; i < hw && i - from < PROFILE_LOOK_MAX && bytes + TCM_SAMPLE_MAPS_BYTES + 256 < PROFILE_PAGE_BYTES; i++) {
        size_t k = hp->n_proc;
        uint32_t len;
        if (!tcm__sample_proc_read(s, i, &recs[k], maps[k], &len))
            continue;
        hp->n_proc++;
        maps[k][len] = 0;
        recs[k].comm[sizeof recs[k].comm - 1] = recs[k].exe[sizeof recs[k].exe - 1] = 0;
        tcm__profile_proc__init(&out[k]);
        out[k].index = i;
        out[k].pid = recs[k].pid;
        out[k].uid = recs[k].uid;
        out[k].name = recs[k].comm;
        out[k].exe = recs[k].exe;
        out[k].live = recs[k].state == TCM_SPROC_LIVE;
        out[k].attached_unix = recs[k].attached_unix;
        out[k].departed_unix = recs[k].departed_unix;
        out[k].maps = maps[k];
        ptrs[k] = &out[k];
        bytes += len + 256;
    }
    return i < hw ? i : 0;
}

#define PROFILE_ROWS_MAX (PROFILE_PAGE_BYTES / 32u)
#define PROFILE_PROCS_MAX (PROFILE_PAGE_BYTES / (TCM_SAMPLE_MAPS_BYTES + 256u) + 1u)

static void samples_page(tcm_conn_t *conn, uint32_t pid, uint32_t from)
{
    Tcm__HeapProfile hp = TCM__HEAP_PROFILE__INIT;
    hp.interval = conn->srv->profile_sample;
    Tcm__ProfileSample *out = calloc(PROFILE_ROWS_MAX, sizeof *out);
    Tcm__ProfileSample **ptrs = calloc(PROFILE_ROWS_MAX, sizeof *ptrs);
    uint64_t(*frames)[TCM_SAMPLE_FRAMES] = calloc(PROFILE_ROWS_MAX, sizeof *frames);
    if (out && ptrs && frames) {
        hp.sample = ptrs;
        hp.next = profile_samples(conn->srv, pid, from, &hp, out, ptrs, frames);
        tcm__conn_reply(conn, TCM__RESPONSE__BODY_HEAP_PROFILE, &hp);
    } else {
        tcm__conn_error(conn, ENOMEM, "out of memory");
    }
    free(out), free(ptrs), free(frames);
}

/* The first page of samples comes after a turn of the heap thread: clients
 * post their samples without waking it (docs/DESIGN.md, "Heap profiles"),
 * and a turn takes in every ring's. */
typedef struct profile_ask {
    tcm_conn_t *conn;
    uint32_t pid;
} profile_ask_t;

#define PROFILE_TURN_WAIT_MS 2000

static void profile_turned(tcm_server_t *srv, void *arg, int rc, uint64_t result, const char *text)
{
    profile_ask_t *a = arg;
    (void)srv, (void)rc, (void)result, (void)text; /* a heap thread late or stopping: the samples it took */
    samples_page(a->conn, a->pid, 0);
    tcm__conn_resume(a->conn);
    free(a);
}

static void handle_heap_profile(tcm_conn_t *conn, const Tcm__HeapProfileRequest *pr)
{
    tcm_server_t *srv = conn->srv;
    profile_ask_t *a;
    if (!pr->procs && pr->from == 0 && (a = malloc(sizeof *a))) {
        *a = (profile_ask_t){conn, pr->pid};
        tcm__conn_wait(conn);
        tcm__mailbox_post(srv, TCM_MBOX_NOP, 0, PROFILE_TURN_WAIT_MS, profile_turned, a);
        return;
    }
    if (!pr->procs) {
        samples_page(conn, pr->pid, pr->from);
        return;
    }
    Tcm__HeapProfile hp = TCM__HEAP_PROFILE__INIT;
    hp.interval = srv->profile_sample;
    Tcm__ProfileProc *out = calloc(PROFILE_PROCS_MAX, sizeof *out);
    Tcm__ProfileProc **ptrs = calloc(PROFILE_PROCS_MAX, sizeof *ptrs);
    tcm_sample_proc_t *recs = calloc(PROFILE_PROCS_MAX, sizeof *recs);
    char(*maps)[TCM_SAMPLE_MAPS_BYTES + 1] = calloc(PROFILE_PROCS_MAX, sizeof *maps);
    if (out && ptrs && recs && maps) {
        hp.proc = ptrs;
        hp.next = profile_procs(srv, pr->from, &hp, out, ptrs, recs, maps);
        tcm__conn_reply(conn, TCM__RESPONSE__BODY_HEAP_PROFILE, &hp);
    } else {
        tcm__conn_error(conn, ENOMEM, "out of memory");
    }
    free(out), free(ptrs), free(recs), free(maps);
}

#define QUOTA_ROWS_MAX 512 /* rows of a quota reply: well under TCM_FRAME_MAX */

static void handle_quota(tcm_conn_t *conn, const Tcm__QuotaRequest *qr)
{
    tcm_server_t *srv = conn->srv;
    if (qr->change) {
        if (!tcm__conn_may_change(conn, "quota"))
            return;
        int err = tcm__quota_set(srv, qr->uid, qr->name, qr->limit);
        if (err) {
            tcm__conn_error(conn, (uint32_t)-err,
                            err == -ENOENT   ? "no such quota (tcmctl quota lists them)"
                            : err == -ENOSPC ? "every quota entry is in use (remove one first)"
                                             : "a process name is at most 15 bytes");
            return;
        }
        tcm__heap_kick(srv); /* to take the rule */
        char size[32];
        tcm__log(TCM_LOG_INFO, "quota of uid %u%s%s: %s", qr->uid, qr->name[0] ? " named " : "", qr->name,
                 qr->limit ? tcm__format_size(qr->limit, size, sizeof size) : "removed");
    }
    tcm_quota_row_t *rows = malloc(QUOTA_ROWS_MAX * sizeof *rows);
    Tcm__QuotaInfo *out = calloc(QUOTA_ROWS_MAX, sizeof *out);
    Tcm__QuotaInfo **ptrs = calloc(QUOTA_ROWS_MAX, sizeof *ptrs);
    if (!rows || !out || !ptrs) {
        free(rows), free(out), free(ptrs);
        tcm__conn_error(conn, ENOMEM, "out of memory");
        return;
    }
    size_t n = tcm__quota_rows(srv, rows, QUOTA_ROWS_MAX);
    if (qr->change) { /* the heap thread takes the rule at its next turn: show it as set */
        bool shown = false;
        for (size_t i = 0; i < n && !shown; i++)
            if (rows[i].rule && rows[i].uid == qr->uid && !strcmp(rows[i].name, qr->name)) {
                rows[i].limit = qr->limit;
                if (!qr->limit)
                    memmove(rows + i, rows + i + 1, (--n - i) * sizeof *rows);
                shown = true;
            }
        if (!shown && qr->limit && n < QUOTA_ROWS_MAX) {
            memmove(rows + 1, rows, n * sizeof *rows);
            rows[0] = (tcm_quota_row_t){.uid = qr->uid, .limit = qr->limit, .rule = true};
            snprintf(rows[0].name, sizeof rows[0].name, "%s", qr->name);
            n++;
        }
    }
    Tcm__Quotas q = TCM__QUOTAS__INIT;
    for (size_t i = 0; i < n; i++) {
        tcm__quota_info__init(&out[i]);
        out[i].uid = rows[i].uid;
        out[i].name = rows[i].name;
        out[i].limit = rows[i].limit;
        out[i].rule = rows[i].rule;
        out[i].bytes_held = rows[i].held;
        out[i].refused = rows[i].refused;
        ptrs[i] = &out[i];
    }
    q.n_quota = n;
    q.quota = ptrs;
    q.uid_quota = atomic_load(&srv->uid_quota);
    tcm__conn_reply(conn, TCM__RESPONSE__BODY_QUOTAS, &q);
    free(rows), free(out), free(ptrs);
}

#define RELEASE_FLUSH_WAIT_MS 200 /* how long release waits for processes to give back what they cache */

/* release: every attached process gives back what it caches (as for a full
 * heap, tcm__client_ask_flush); the heap thread releases once all have
 * acknowledged, or after RELEASE_FLUSH_WAIT_MS, so that it finds those
 * pages free. */
typedef struct releasing {
    tcm_conn_t *conn;
    int64_t before;
    uint32_t hw;
    uint32_t gen[]; /* per client index: the flush asked, 0 none */
} releasing_t;

static bool flushed(tcm_server_t *srv, void *arg)
{
    releasing_t *r = arg;
    for (uint32_t i = 0; i < r->hw; i++) {
        tcm_client_t *c = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
        if (r->gen[i] && c && atomic_load(&c->rec->state) == TCM_REC_ACTIVE &&
            (int32_t)(atomic_load(&((tcm_chan_hdr_t *)c->chan)->flush_ack) - r->gen[i]) < 0) /* or a later ask */
            return false;
    }
    return true;
}

static void released(tcm_server_t *srv, void *arg, int rc, uint64_t bytes, const char *text)
{
    releasing_t *r = arg;
    (void)text;
    int64_t after = tcm__backed_bytes(srv->heap_fd);
    if (rc) {
        tcm__conn_error(r->conn, (uint32_t)-rc, "release did not run");
    } else {
        tcm__log(TCM_LOG_INFO, "release: %llu bytes given back (backed %lld -> %lld)", (unsigned long long)bytes,
                 (long long)r->before, (long long)after);
        Tcm__Released m = TCM__RELEASED__INIT;
        m.released_bytes = bytes;
        m.committed_before = r->before > 0 ? (uint64_t)r->before : 0;
        m.committed_after = after > 0 ? (uint64_t)after : 0;
        tcm__conn_reply(r->conn, TCM__RESPONSE__BODY_RELEASED, &m);
    }
    tcm__conn_resume(r->conn);
    free(r);
}

static void handle_release(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    uint32_t hw = atomic_load_explicit(&srv->clients_hw, memory_order_acquire);
    releasing_t *r = calloc(1, sizeof *r + (hw ? hw : 1) * sizeof r->gen[0]);
    if (!r) {
        tcm__conn_error(conn, ENOMEM, "out of memory");
        return;
    }
    r->conn = conn;
    r->hw = hw;
    r->before = tcm__backed_bytes(srv->heap_fd);
    uint32_t asked = 0;
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load_explicit(&srv->clients[i], memory_order_acquire);
        if (c && atomic_load(&c->rec->state) == TCM_REC_ACTIVE) {
            r->gen[i] = tcm__client_ask_flush(c);
            asked++;
        }
    }
    /* (also the event integration.control waits for before it pings
     * during the wait) */
    tcm__log(TCM_LOG_DEBUG, "release: flush asked of %u attached processes, waiting up to %d ms for them", asked,
             RELEASE_FLUSH_WAIT_MS);
    tcm__conn_wait(conn);
    tcm__mailbox_post_when(srv, TCM_MBOX_RELEASE, 0, -1, flushed, RELEASE_FLUSH_WAIT_MS, released, r);
}

/* A request the heap thread answers (the health probe, check): the
 * connection waits meanwhile. */
typedef struct asking {
    tcm_conn_t *conn;
    uint64_t t0;
} asking_t;

static void ask_heap_thread(tcm_conn_t *conn, int cmd, int timeout_ms, tcm_mbox_done_t done)
{
    asking_t *a = malloc(sizeof *a);
    if (!a) {
        tcm__conn_error(conn, ENOMEM, "out of memory");
        return;
    }
    *a = (asking_t){conn, tcm__now_ns()};
    tcm__conn_wait(conn);
    tcm__mailbox_post(conn->srv, cmd, 0, timeout_ms, done, a);
}

static void answered(asking_t *a)
{
    tcm__conn_resume(a->conn);
    free(a);
}

#define HEALTH_WAIT_MS 2000

static void probed(tcm_server_t *srv, void *arg, int rc, uint64_t result, const char *text)
{
    asking_t *a = arg;
    (void)result, (void)text;
    Tcm__Health h = TCM__HEALTH__INIT;
    h.heap_thread_ok = rc == 0;
    h.heap_thread_rtt_us = (tcm__now_ns() - a->t0) / 1000;
    h.ok = h.heap_thread_ok;
    h.clients = (uint32_t)atomic_load(&srv->meta->stats.clients_attached);
    h.uptime_ms = (tcm__now_ns() - srv->start_ns) / 1000000;
    h.version = TCM_VERSION_STRING;
    h.message = h.ok ? "ok" : rc == -ETIMEDOUT ? "the heap thread did not answer within 2 s" : "tcmd is shutting down";
    tcm__conn_reply(a->conn, TCM__RESPONSE__BODY_HEALTH, &h);
    answered(a);
}

static void handle_health(tcm_conn_t *conn)
{
    ask_heap_thread(conn, TCM_MBOX_NOP, HEALTH_WAIT_MS, probed);
}

static void handle_classes(tcm_conn_t *conn)
{
    Tcm__ClassInfo rows[TCM_NCLASSES], *ptrs[TCM_NCLASSES];
    Tcm__Classes classes = TCM__CLASSES__INIT;
    classes.n_cls = tcm__classes_view(conn->srv, rows);
    for (size_t i = 0; i < classes.n_cls; i++)
        ptrs[i] = &rows[i];
    classes.cls = ptrs;
    tcm__conn_reply(conn, TCM__RESPONSE__BODY_CLASSES, &classes);
}

static void send_config(tcm_conn_t *conn, const char *only)
{
    Tcm__Setting set[32], *ptrs[32];
    char values[32][64];
    size_t n = 0;
    const tcm_setting_info_t *info;
    only = only && *only ? tcm__config_key(only) : NULL; /* (decay-ms is decay_ms) */
    for (size_t i = 0; (info = tcm__config_setting(i)) && n < 32; i++) {
        if (only && strcmp(only, info->name) != 0)
            continue;
        tcm__setting__init(&set[n]);
        tcm__config_get(conn->srv, info->name, values[n], sizeof values[n]);
        set[n].key = (char *)info->name;
        set[n].value = values[n];
        set[n].runtime = info->runtime;
        set[n].help = (char *)info->help;
        ptrs[n] = &set[n];
        n++;
    }
    Tcm__Config cfg = TCM__CONFIG__INIT;
    cfg.n_setting = n;
    cfg.setting = ptrs;
    tcm__conn_reply(conn, TCM__RESPONSE__BODY_CONFIG, &cfg);
}

static void handle_config_get(tcm_conn_t *conn, const Tcm__ConfigGet *get)
{
    char value[64];
    if (get->key && *get->key && tcm__config_get(conn->srv, get->key, value, sizeof value) != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "unknown setting '%.60s' (tcmctl config get lists them)", get->key);
        tcm__conn_error(conn, ENOENT, msg);
        return;
    }
    send_config(conn, get->key);
}

/* A config set or resize the heap thread applies answers here. */
typedef struct changing {
    tcm_conn_t *conn;
    bool resize;
    uint64_t old_limit;
    char key[64];
} changing_t;

static void changed(tcm_server_t *srv, void *arg, int rc, const char *err)
{
    changing_t *ch = arg;
    if (rc < 0) {
        tcm__conn_error(ch->conn, (uint32_t)-rc, err);
    } else if (ch->resize) {
        Tcm__Resized r = TCM__RESIZED__INIT;
        r.old_limit = ch->old_limit;
        r.new_limit = atomic_load(&srv->meta->config.heap_limit);
        tcm__conn_reply(ch->conn, TCM__RESPONSE__BODY_RESIZED, &r);
    } else {
        send_config(ch->conn, ch->key);
    }
    tcm__conn_resume(ch->conn);
    free(ch);
}

static void change(tcm_conn_t *conn, const char *key, const char *value, bool resize)
{
    tcm_server_t *srv = conn->srv;
    char err[256];
    changing_t *ch = calloc(1, sizeof *ch);
    if (!ch) {
        tcm__conn_error(conn, ENOMEM, "out of memory");
        return;
    }
    *ch = (changing_t){.conn = conn, .resize = resize, .old_limit = atomic_load(&srv->meta->config.heap_limit)};
    snprintf(ch->key, sizeof ch->key, "%s", key);
    tcm__conn_wait(conn);
    int rc = tcm__config_set(srv, key, value, true, err, sizeof err, changed, ch);
    if (rc != TCM_CONFIG_PENDING)
        changed(srv, ch, rc, err);
}

static void handle_config_set(tcm_conn_t *conn, const Tcm__ConfigSet *set)
{
    if (tcm__conn_may_change(conn, "config set"))
        change(conn, set->key ? set->key : "", set->value ? set->value : "", false);
}

static void handle_resize(tcm_conn_t *conn, const Tcm__Resize *rs)
{
    char value[32];
    snprintf(value, sizeof value, "%llu", (unsigned long long)rs->limit);
    if (tcm__conn_may_change(conn, "resize"))
        change(conn, "heap_limit", value, true);
}

#define ROOTS_ROWS_MAX 960 /* rows of a roots reply: under TCM_FRAME_MAX (64 KiB) with the longest names */

static void handle_roots(tcm_conn_t *conn)
{
    tcm_server_t *srv = conn->srv;
    Tcm__RootInfo *infos = calloc(ROOTS_ROWS_MAX, sizeof *infos);
    Tcm__RootInfo **ptrs = calloc(ROOTS_ROWS_MAX, sizeof *ptrs);
    char (*names)[TCM_ROOT_NAME_MAX] = calloc(ROOTS_ROWS_MAX, sizeof *names);
    if (!infos || !ptrs || !names) {
        free(infos), free(ptrs), free(names);
        tcm__conn_error(conn, ENOMEM, "out of memory");
        return;
    }
    size_t n = 0;
    for (unsigned i = 0; i < srv->h.nroots && n < ROOTS_ROWS_MAX; i++) {
        uint64_t off;
        uint32_t holder = tcm__root_read(&srv->h.roots[i], &off, names[n]);
        if (!tcm__root_live(holder))
            continue;
        tcm__root_info__init(&infos[n]);
        infos[n].name = names[n];
        infos[n].offset = off;
        ptrs[n] = &infos[n];
        n++;
    }
    Tcm__Roots roots = TCM__ROOTS__INIT;
    roots.n_root = n;
    roots.root = ptrs;
    tcm__conn_reply(conn, TCM__RESPONSE__BODY_ROOTS, &roots);
    free(infos), free(ptrs), free(names);
}

static void handle_detach(tcm_conn_t *conn, const Tcm__Detach *d)
{
    tcm_server_t *srv = conn->srv;
    if (!tcm__conn_may_change(conn, "detach"))
        return;
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        uint32_t expected = TCM_REC_ACTIVE;
        if (c && c->rec->id == d->client_id &&
            atomic_compare_exchange_strong(&c->rec->state, &expected, TCM_REC_EVICTED)) {
            tcm__log(TCM_LOG_WARN, "client %u (pid %u) detached by an operator: its allocations now fail",
                     c->rec->id, c->rec->pid);
            Tcm__Detached r = TCM__DETACHED__INIT;
            r.client_id = c->rec->id;
            r.pid = c->rec->pid;
            tcm__conn_reply(conn, TCM__RESPONSE__BODY_DETACHED, &r);
            return;
        }
    }
    tcm__conn_error(conn, ENOENT, "no attached client with that id (tcmctl clients lists them)");
}

static void checked(tcm_server_t *srv, void *arg, int rc, uint64_t bad, const char *text)
{
    asking_t *a = arg;
    (void)srv;
    if (rc) {
        tcm__conn_error(a->conn, (uint32_t)-rc, "the check did not run");
    } else {
        Tcm__CheckResult r = TCM__CHECK_RESULT__INIT;
        r.ok = bad == TCM_VALID;
        r.client_only = bad == TCM_INVALID_CLIENT;
        r.message = (char *)text;
        r.duration_us = (tcm__now_ns() - a->t0) / 1000;
        tcm__log(r.ok ? TCM_LOG_INFO : r.client_only ? TCM_LOG_WARN : TCM_LOG_ERROR, "check: %s", text);
        tcm__conn_reply(a->conn, TCM__RESPONSE__BODY_CHECK, &r);
    }
    answered(a);
}

static void handle_check(tcm_conn_t *conn)
{
    ask_heap_thread(conn, TCM_MBOX_CHECK, -1, checked);
}

void tcm__control_handle(tcm_conn_t *conn, const Tcm__Request *req)
{
    switch (req->body_case) {
    case TCM__REQUEST__BODY_HELLO:
        handle_hello(conn, req->hello);
        break;
    case TCM__REQUEST__BODY_PING:
        handle_ping(conn, req->ping);
        break;
    case TCM__REQUEST__BODY_STATS:
        handle_stats(conn);
        break;
    case TCM__REQUEST__BODY_CLIENTS:
        handle_clients(conn);
        break;
    case TCM__REQUEST__BODY_DEPARTED:
        handle_departed(conn, req->departed);
        break;
    case TCM__REQUEST__BODY_QUOTA:
        handle_quota(conn, req->quota);
        break;
    case TCM__REQUEST__BODY_HEAP_PROFILE:
        /* code addresses of other processes defeat their ASLR */
        if (tcm__conn_may_change(conn, "heap-profile"))
            handle_heap_profile(conn, req->heap_profile);
        break;
    case TCM__REQUEST__BODY_RELEASE:
        if (tcm__conn_may_change(conn, "release"))
            handle_release(conn);
        break;
    case TCM__REQUEST__BODY_HEALTH:
        handle_health(conn);
        break;
    case TCM__REQUEST__BODY_CLASSES:
        handle_classes(conn);
        break;
    case TCM__REQUEST__BODY_CONFIG_GET:
        handle_config_get(conn, req->config_get);
        break;
    case TCM__REQUEST__BODY_CONFIG_SET:
        handle_config_set(conn, req->config_set);
        break;
    case TCM__REQUEST__BODY_RESIZE:
        handle_resize(conn, req->resize);
        break;
    case TCM__REQUEST__BODY_ROOTS:
        handle_roots(conn);
        break;
    case TCM__REQUEST__BODY_DETACH:
        handle_detach(conn, req->detach);
        break;
    case TCM__REQUEST__BODY_CHECK:
        /* it holds the heap thread for as long as it runs: not for any
         * peer the socket lets in */
        if (tcm__conn_may_change(conn, "check"))
            handle_check(conn);
        break;
    case TCM__REQUEST__BODY_BYE:
        if (conn->client)
            atomic_store(&conn->client->rec->said_bye, 1);
        break;
    default:
        tcm__conn_error(conn, EOPNOTSUPP, "unknown request");
        break;
    }
}

