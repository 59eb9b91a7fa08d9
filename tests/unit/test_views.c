/* test_views.c — every protobuf field of a view has exactly one descriptor
 * row and back, and a row prints the same figures as JSON and as a table. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "views.h"

static char *printed(void (*print)(FILE *, const tcm_view_t *, ProtobufCMessage *const *, size_t),
                     const tcm_view_t *v, ProtobufCMessage *const *rows, size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f);
    print(f, v, rows, n);
    fclose(f);
    return buf;
}

int main(void)
{
    const tcm_view_t *views[] = {&tcm__view_classes, &tcm__view_clients};
    for (size_t k = 0; k < 2; k++) {
        const char *bad = tcm__view_mismatch(views[k]);
        if (bad)
            fprintf(stderr, "view %s: field %s has no row, or a row names no integer field\n", views[k]->name, bad);
        CHECK(bad == NULL);
        CHECK_EQ(views[k]->nfields, views[k]->desc->n_fields);
    }

    Tcm__ClientInfo a = TCM__CLIENT_INFO__INIT, b = TCM__CLIENT_INFO__INIT;
    a.client_id = 7, a.pid = 4242, a.bytes_held = 3u << 20, a.requests = 1234567890123ull, a.attached_unix = 0;
    b.client_id = 8, b.errors = 5;
    ProtobufCMessage *rows[] = {&a.base, &b.base};
    CHECK_EQ(tcm__view_value(&tcm__view_clients, 0, rows[0]), 7);

    char *json = printed(tcm__view_print_json, &tcm__view_clients, rows, 2);
    CHECK(strstr(json, "[{\"client_id\":7,\"pid\":4242,") == json);
    CHECK(strstr(json, "\"bytes_held\":3145728"));
    CHECK(strstr(json, "\"requests\":1234567890123"));
    CHECK(strstr(json, "},{\"client_id\":8,"));
    CHECK(strstr(json, "\"errors\":5,"));
    free(json);

    char *table = printed(tcm__view_print_table, &tcm__view_clients, rows, 2);
    char *line2 = strchr(table, '\n') + 1;
    CHECK(strstr(table, "held") < line2 && strstr(table, "attached") < line2); /* the header first */
    CHECK(strstr(line2, "4242"));
    CHECK(strstr(line2, "3.00M")); /* bytes shown with a unit */
    CHECK(strstr(line2, "1234567890123"));
    int lines = 0;
    for (char *p = table; *p; p++)
        lines += *p == '\n';
    CHECK_EQ(lines, 3);
    free(table);
    printf("views: %zu class fields, %zu client fields\n", tcm__view_classes.nfields, tcm__view_clients.nfields);
    return 0;
}
