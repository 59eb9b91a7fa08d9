/* rows.h — the classes and clients views' rows, as proto/views.h shows
 * them. Main thread. */
#ifndef TCM_ROWS_H
#define TCM_ROWS_H

#include <stddef.h>

#include "server.h"
#include "tcm.pb-c.h"

/* One row per size class (rows: TCM_NCLASSES - 1), one per attached client
 * (rows: srv->max_clients); return how many. */
size_t tcm__classes_view(const tcm_server_t *srv, Tcm__ClassInfo *rows);
size_t tcm__clients_view(const tcm_server_t *srv, Tcm__ClientInfo *rows);

#endif
