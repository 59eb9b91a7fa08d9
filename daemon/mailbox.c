/* mailbox.c — the main loop's commands for the heap thread (release,
 * resize, check, the health probe). They queue here and go to the heap
 * thread one at a time through srv->mbox_*; the heap thread answers with
 * uv_async_send, so a long hole-punch delays only the commands behind it,
 * never the loop: ping, stats and attaching go on. Main thread only, but
 * for the posted command's fields, which mbox_lock guards. Nothing here
 * outlives tcmd: a command lost with a crash was never answered, and its
 * caller's connection is gone with it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "mailbox.h"
#include "prim.h"
#include "server.h"

#define TICK_MS 2 /* deadlines and readiness are checked this often while any wait */

typedef struct tcm_mbox_job {
    struct tcm_mbox_job *next;
    int cmd;
    uint64_t arg;
    uint64_t deadline_ns; /* 0: none */
    bool (*ready)(tcm_server_t *srv, void *ctx); /* NULL, or posted once true or at ready_by_ns */
    uint64_t ready_by_ns;
    tcm_mbox_done_t done;
    void *ctx;
    bool posted, answered;
} tcm_mbox_job_t;

static void on_tick(uv_timer_t *timer);

static void post_head(tcm_server_t *srv)
{
    tcm_mbox_job_t *j = srv->mbox_head;
    if (!j || j->posted)
        return;
    if (j->ready && !j->answered && tcm__now_ns() < j->ready_by_ns && !j->ready(srv, j->ctx)) {
        if (!uv_is_active((uv_handle_t *)&srv->mbox_timer)) /* the tick asks again */
            uv_timer_start(&srv->mbox_timer, on_tick, TICK_MS, TICK_MS);
        return;
    }
    pthread_mutex_lock(&srv->mbox_lock);
    srv->mbox_arg = j->arg;
    srv->mbox_done = false;
    srv->mbox_text[0] = 0;
    atomic_store_explicit(&srv->mbox_cmd, j->cmd, memory_order_release);
    pthread_mutex_unlock(&srv->mbox_lock);
    j->posted = true;
    srv->mbox_wake(srv);
}

static void answer(tcm_server_t *srv, tcm_mbox_job_t *j, int rc, uint64_t result, const char *text)
{
    if (j->answered)
        return;
    j->answered = true;
    j->done(srv, j->ctx, rc, result, text);
}

static void on_answer(uv_async_t *async)
{
    tcm_server_t *srv = async->data;
    tcm_mbox_job_t *j = srv->mbox_head;
    if (!j || !j->posted)
        return;
    char text[sizeof srv->mbox_text];
    pthread_mutex_lock(&srv->mbox_lock);
    bool done = srv->mbox_done;
    uint64_t result = srv->mbox_result;
    memcpy(text, srv->mbox_text, sizeof text);
    pthread_mutex_unlock(&srv->mbox_lock);
    if (!done)
        return;
    text[sizeof text - 1] = 0;
    srv->mbox_head = j->next;
    if (!srv->mbox_head)
        srv->mbox_tail = NULL;
    answer(srv, j, 0, result, text);
    free(j);
    post_head(srv);
}

/* Jobs past their deadline are answered -ETIMEDOUT: one not yet posted
 * leaves the queue, the posted one stays until the heap thread is done. A
 * head waiting to be ready is asked again. The queue is made consistent
 * before any answer runs: an answer resumes its connection, whose next
 * request may be posted from inside it. */
static void on_tick(uv_timer_t *timer)
{
    tcm_server_t *srv = timer->data;
    uint64_t now = tcm__now_ns();
    tcm_mbox_job_t *late = NULL, **pp = &srv->mbox_head, *j;
    srv->mbox_tail = NULL;
    while ((j = *pp)) {
        if (!j->posted && j->deadline_ns && now >= j->deadline_ns) {
            *pp = j->next;
            j->next = late;
            late = j;
            continue;
        }
        srv->mbox_tail = j;
        pp = &j->next;
    }
    j = srv->mbox_head;
    if (j && j->posted && j->deadline_ns && now >= j->deadline_ns)
        answer(srv, j, -ETIMEDOUT, 0, "");
    while ((j = late)) {
        late = j->next;
        answer(srv, j, -ETIMEDOUT, 0, "");
        free(j);
    }
    post_head(srv);
    bool waiting = false;
    for (j = srv->mbox_head; j; j = j->next)
        waiting |= (j->deadline_ns && !j->answered) || (j->ready && !j->posted);
    if (!waiting)
        uv_timer_stop(timer);
}

void tcm__mailbox_post_when(tcm_server_t *srv, int cmd, uint64_t arg, int timeout_ms,
                            bool (*ready)(tcm_server_t *srv, void *ctx), int wait_ms, tcm_mbox_done_t done, void *ctx)
{
    if (srv->mbox_closed) {
        done(srv, ctx, -ECANCELED, 0, "tcmd is shutting down");
        return;
    }
    tcm_mbox_job_t *j = calloc(1, sizeof *j);
    if (!j) {
        done(srv, ctx, -ENOMEM, 0, "out of memory");
        return;
    }
    uint64_t now = tcm__now_ns();
    *j = (tcm_mbox_job_t){.cmd = cmd, .arg = arg, .ready = ready, .done = done, .ctx = ctx,
                          .ready_by_ns = now + (uint64_t)(wait_ms > 0 ? wait_ms : 0) * 1000000u};
    if (timeout_ms >= 0) {
        j->deadline_ns = now + (uint64_t)timeout_ms * 1000000u;
        if (!uv_is_active((uv_handle_t *)&srv->mbox_timer))
            uv_timer_start(&srv->mbox_timer, on_tick, TICK_MS, TICK_MS);
    }
    if (srv->mbox_tail)
        srv->mbox_tail->next = j;
    else
        srv->mbox_head = j;
    srv->mbox_tail = j;
    post_head(srv);
}

void tcm__mailbox_post(tcm_server_t *srv, int cmd, uint64_t arg, int timeout_ms, tcm_mbox_done_t done, void *ctx)
{
    tcm__mailbox_post_when(srv, cmd, arg, timeout_ms, NULL, 0, done, ctx);
}

void tcm__mailbox_start(tcm_server_t *srv, void (*wake)(tcm_server_t *srv))
{
    srv->mbox_wake = wake;
    uv_async_init(srv->loop, &srv->mbox_async, on_answer);
    srv->mbox_async.data = srv;
    uv_timer_init(srv->loop, &srv->mbox_timer);
    srv->mbox_timer.data = srv;
}

void tcm__mailbox_cancel(tcm_server_t *srv)
{
    on_answer(&srv->mbox_async); /* the last one may have finished as the heap thread stopped */
    srv->mbox_closed = true;
    while (srv->mbox_head) {
        tcm_mbox_job_t *j = srv->mbox_head;
        srv->mbox_head = j->next;
        answer(srv, j, -ECANCELED, 0, "tcmd is shutting down");
        free(j);
    }
    srv->mbox_tail = NULL;
}
