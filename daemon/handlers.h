/* handlers.h — the answers to control requests (handlers.c). Main thread
 * only. */
#ifndef TCM_HANDLERS_H
#define TCM_HANDLERS_H

#include "tcm.pb-c.h"
#include "transport.h"

/* One decoded request (the transport's request callback). */
void tcm__control_handle(tcm_conn_t *conn, const Tcm__Request *req);

#endif
