/* rows.c — the rows of the classes and clients views (proto/views.h),
 * filled once for the control socket and /metrics. */
#include "rows.h"

#include "stats.h"

size_t tcm__classes_view(const tcm_server_t *srv, Tcm__ClassInfo *rows)
{
    size_t n = 0;
    for (unsigned c = 1; c < TCM_NCLASSES; c++) {
        const tcm_class_info_t *ci = &srv->h.classes[c];
        const tcm_class_stats_t *cs = &srv->h.cstats[c];
        Tcm__ClassInfo *x = &rows[n++];
        tcm__class_info__init(x);
        x->cls = c;
        x->size = ci->size;
        x->span_pages = ci->span_pages;
        x->objects_per_span = ci->span_objs;
        x->spans = atomic_load(&cs->spans);
        x->objects_free = atomic_load(&cs->free_objs);
        uint64_t total = x->spans * ci->span_objs;
        x->objects_in_use = total > x->objects_free ? total - x->objects_free : 0;
        x->batches_out = atomic_load(&cs->refills);
        x->batches_in = atomic_load(&cs->returns);
    }
    return n;
}

size_t tcm__clients_view(const tcm_server_t *srv, Tcm__ClientInfo *rows)
{
    size_t n = 0;
    uint32_t hw = atomic_load(&srv->clients_hw);
    for (uint32_t i = 0; i < hw && n < srv->max_clients; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (!c || atomic_load(&c->rec->state) == TCM_REC_DEAD)
            continue;
        Tcm__ClientInfo *ci = &rows[n++];
        tcm__client_info__init(ci);
        const tcm_client_rec_t *rec = c->rec;
        uint64_t out = atomic_load(&rec->bytes_out), in = atomic_load(&rec->bytes_back);
        ci->client_id = rec->id;
        ci->pid = rec->pid;
        ci->uid = rec->uid;
        ci->bytes_held = out > in ? out - in : 0;
        tcm__client_usage(srv, c, &ci->threads, &ci->bytes_cached);
        ci->requests = atomic_load(&rec->requests);
        ci->errors = atomic_load(&rec->errors);
        ci->attached_unix = rec->attached_unix;
    }
    return n;
}
