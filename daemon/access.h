/* access.h — who may do what on the control socket (access.c). Main
 * thread only. */
#ifndef TCM_ACCESS_H
#define TCM_ACCESS_H

#include <stdbool.h>

#include "transport.h"

/* Access: changing anything is for tcmd's uid and root; attaching also for
 * --allow-group. Refusals are answered and logged here. */
bool tcm__conn_may_change(tcm_conn_t *conn, const char *what);
bool tcm__conn_may_attach(tcm_conn_t *conn);

#endif
