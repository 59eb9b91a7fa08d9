/* views.h — how each per-row view of the control protocol (classes,
 * clients) is shown: one descriptor row per protobuf field gives its JSON
 * key, its column in tcmctl's table and its Prometheus family. tcmd's
 * control socket and /metrics and tcmctl all read these tables, so a new
 * figure is a protobuf field, its row here and the line that fills it.
 * (The stats view is a list of named rows already: see daemon/stats.c.) */
#ifndef TCM_VIEWS_H
#define TCM_VIEWS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tcm.pb-c.h"

typedef enum { TCM_SHOW_NUM, TCM_SHOW_BYTES, TCM_SHOW_TIME } tcm_show_t;
typedef enum { TCM_PROM_NONE, TCM_PROM_LABEL, TCM_PROM_GAUGE, TCM_PROM_COUNTER } tcm_prom_t;

typedef struct tcm_view_field {
    const char *field;  /* the protobuf field */
    const char *json;   /* its key in tcmctl --json */
    const char *column; /* its header in tcmctl's table */
    int width;
    tcm_show_t show;
    tcm_prom_t prom;
    const char *prom_name; /* label name, or metric family after the view's prefix */
    const char *help;
} tcm_view_field_t;

typedef struct tcm_view {
    const char *name;       /* the tcmctl command */
    const char *prom_prefix; /* "tcm_class_" */
    const ProtobufCMessageDescriptor *desc;
    const tcm_view_field_t *fields;
    size_t nfields;
} tcm_view_t;

extern const tcm_view_t tcm__view_classes, tcm__view_clients;

/* Field i of a row (uint32 and uint64 fields). */
uint64_t tcm__view_value(const tcm_view_t *v, size_t i, const ProtobufCMessage *row);
/* 0, or the first field whose descriptor row and protobuf field disagree
 * (missing, unknown, not an integer): tests call it for every view. */
const char *tcm__view_mismatch(const tcm_view_t *v);

void tcm__view_print_json(FILE *f, const tcm_view_t *v, ProtobufCMessage *const *rows, size_t n);

/* A JSON key that is not its protobuf field's name (ping keeps the keys it
 * was first given), or, with json NULL, a field JSON does not show. */
typedef struct tcm_json_key {
    const char *field;
    const char *json;
} tcm_json_key_t;

/* The fields of one message as the members of a JSON object, braces left
 * to the caller: each key the protobuf field's name (written once, in the
 * .proto) unless keys rename or hide it. uint32, uint64, bool and string
 * fields; strings pass through escape, which makes them JSON. Returns how
 * many members it printed. */
size_t tcm__json_members(FILE *f, const ProtobufCMessage *m, const tcm_json_key_t *keys, size_t nkeys,
                         const char *(*escape)(const char *));
void tcm__view_print_table(FILE *f, const tcm_view_t *v, ProtobufCMessage *const *rows, size_t n);

#endif
