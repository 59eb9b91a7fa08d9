/* views.c — the descriptor tables of the classes and clients views, and
 * what shows them the same way everywhere. */
#include "views.h"

#include <string.h>

#include "prim.h"
#include "util.h"

#define N(a) (sizeof(a) / sizeof(a)[0])

static const tcm_view_field_t class_fields[] = {
    {"cls", "class", "class", 5, TCM_SHOW_NUM, TCM_PROM_LABEL, "class", "size class"},
    {"size", "size", "size", 8, TCM_SHOW_NUM, TCM_PROM_LABEL, "size", "object size in bytes"},
    {"span_pages", "span_pages", "pages", 6, TCM_SHOW_NUM, TCM_PROM_NONE, NULL, "pages per span"},
    {"objects_per_span", "objects_per_span", "objs", 6, TCM_SHOW_NUM, TCM_PROM_NONE, NULL, "objects per span"},
    {"spans", "spans", "spans", 7, TCM_SHOW_NUM, TCM_PROM_GAUGE, "spans", "spans cut for a size class"},
    {"objects_in_use", "objects_in_use", "in use", 10, TCM_SHOW_NUM, TCM_PROM_GAUGE, "objects_in_use",
     "objects of a size class handed to clients"},
    {"objects_free", "objects_free", "free", 10, TCM_SHOW_NUM, TCM_PROM_GAUGE, "objects_free",
     "objects of a size class free in the central lists"},
    {"batches_out", "batches_out", "batch out", 10, TCM_SHOW_NUM, TCM_PROM_COUNTER, "batches_out",
     "refill batches of a size class served"},
    {"batches_in", "batches_in", "batch in", 10, TCM_SHOW_NUM, TCM_PROM_COUNTER, "batches_in",
     "return batches of a size class received"},
};

static const tcm_view_field_t client_fields[] = {
    {"client_id", "client_id", "id", 6, TCM_SHOW_NUM, TCM_PROM_LABEL, "client", "client id"},
    {"pid", "pid", "pid", 8, TCM_SHOW_NUM, TCM_PROM_LABEL, "pid", "process id"},
    {"uid", "uid", "uid", 6, TCM_SHOW_NUM, TCM_PROM_NONE, NULL, "user id"},
    {"threads", "threads", "threads", 7, TCM_SHOW_NUM, TCM_PROM_GAUGE, "threads", "threads with a cache"},
    {"bytes_held", "bytes_held", "held", 10, TCM_SHOW_BYTES, TCM_PROM_GAUGE, "held_bytes",
     "bytes a client allocated that nobody has freed yet"},
    {"bytes_cached", "bytes_cached", "cached", 10, TCM_SHOW_BYTES, TCM_PROM_GAUGE, "cached_bytes",
     "bytes in a client's caches"},
    {"requests", "requests", "requests", 10, TCM_SHOW_NUM, TCM_PROM_COUNTER, "requests", "ring requests of a client"},
    {"errors", "errors", "errors", 6, TCM_SHOW_NUM, TCM_PROM_COUNTER, "errors",
     "refused requests or objects of a client"},
    {"attached_unix", "attached_unix", "attached", 19, TCM_SHOW_TIME, TCM_PROM_NONE, NULL,
     "when the client attached (Unix time)"},
};

const tcm_view_t tcm__view_classes = {"classes", "tcm_class_", &tcm__class_info__descriptor, class_fields,
                                      N(class_fields)};
const tcm_view_t tcm__view_clients = {"clients", "tcm_client_", &tcm__client_info__descriptor, client_fields,
                                      N(client_fields)};

static const ProtobufCFieldDescriptor *proto_field(const tcm_view_t *v, size_t i)
{
    return protobuf_c_message_descriptor_get_field_by_name(v->desc, v->fields[i].field);
}

uint64_t tcm__view_value(const tcm_view_t *v, size_t i, const ProtobufCMessage *row)
{
    const ProtobufCFieldDescriptor *f = proto_field(v, i);
    const char *p = (const char *)row + f->offset;
    if (f->type == PROTOBUF_C_TYPE_UINT64) {
        uint64_t x;
        memcpy(&x, p, sizeof x);
        return x;
    }
    uint32_t x;
    memcpy(&x, p, sizeof x);
    return x;
}

const char *tcm__view_mismatch(const tcm_view_t *v)
{
    for (size_t i = 0; i < v->nfields; i++) {
        const ProtobufCFieldDescriptor *f = proto_field(v, i);
        if (!f || (f->type != PROTOBUF_C_TYPE_UINT32 && f->type != PROTOBUF_C_TYPE_UINT64) ||
            f->label == PROTOBUF_C_LABEL_REPEATED)
            return v->fields[i].field;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(v->fields[j].field, v->fields[i].field))
                return v->fields[i].field;
    }
    if (v->desc->n_fields != v->nfields) /* a protobuf field nobody shows */
        for (unsigned k = 0; k < v->desc->n_fields; k++) {
            size_t i = 0;
            while (i < v->nfields && strcmp(v->fields[i].field, v->desc->fields[k].name))
                i++;
            if (i == v->nfields)
                return v->desc->fields[k].name;
        }
    return NULL;
}

void tcm__view_print_json(FILE *f, const tcm_view_t *v, ProtobufCMessage *const *rows, size_t n)
{
    fputc('[', f);
    for (size_t r = 0; r < n; r++) {
        fputs(r ? ",{" : "{", f);
        for (size_t i = 0; i < v->nfields; i++)
            fprintf(f, "%s\"%s\":%llu", i ? "," : "", v->fields[i].json,
                    (unsigned long long)tcm__view_value(v, i, rows[r]));
        fputc('}', f);
    }
    fputs("]\n", f);
}

size_t tcm__json_members(FILE *f, const ProtobufCMessage *m, const tcm_json_key_t *keys, size_t nkeys,
                         const char *(*escape)(const char *))
{
    size_t printed = 0;
    for (unsigned k = 0; k < m->descriptor->n_fields; k++) {
        const ProtobufCFieldDescriptor *fd = &m->descriptor->fields[k];
        const char *key = fd->name;
        for (size_t r = 0; r < nkeys; r++)
            if (!strcmp(keys[r].field, fd->name))
                key = keys[r].json;
        if (!key)
            continue;
        const char *p = (const char *)m + fd->offset;
        fprintf(f, "%s\"%s\":", printed++ ? "," : "", key);
        if (fd->type == PROTOBUF_C_TYPE_UINT64) {
            uint64_t x;
            memcpy(&x, p, sizeof x);
            fprintf(f, "%llu", (unsigned long long)x);
        } else if (fd->type == PROTOBUF_C_TYPE_UINT32) {
            uint32_t x;
            memcpy(&x, p, sizeof x);
            fprintf(f, "%u", x);
        } else if (fd->type == PROTOBUF_C_TYPE_BOOL) {
            protobuf_c_boolean x;
            memcpy(&x, p, sizeof x);
            fputs(x ? "true" : "false", f);
        } else if (fd->type == PROTOBUF_C_TYPE_STRING) {
            const char *x;
            memcpy(&x, p, sizeof x);
            fprintf(f, "\"%s\"", escape(x ? x : ""));
        } else { /* a type no record shown this way has yet */
            fputs("null", f);
        }
    }
    return printed;
}

void tcm__view_print_table(FILE *f, const tcm_view_t *v, ProtobufCMessage *const *rows, size_t n)
{
    for (size_t i = 0; i < v->nfields; i++)
        fprintf(f, "%s%*s", i ? " " : "", v->fields[i].width, v->fields[i].column);
    fputc('\n', f);
    for (size_t r = 0; r < n; r++) {
        for (size_t i = 0; i < v->nfields; i++) {
            const tcm_view_field_t *fd = &v->fields[i];
            uint64_t x = tcm__view_value(v, i, rows[r]);
            char buf[32];
            if (fd->show == TCM_SHOW_BYTES) {
                tcm__format_size(x, buf, sizeof buf);
            } else if (fd->show == TCM_SHOW_TIME) {
                tcm__format_time(x, buf, sizeof buf);
            } else {
                snprintf(buf, sizeof buf, "%llu", (unsigned long long)x);
            }
            fprintf(f, "%s%*s", i ? " " : "", fd->width, buf);
        }
        fputc('\n', f);
    }
}
