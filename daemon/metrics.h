/* metrics.h — the Prometheus endpoint (tcmd --metrics-port). */
#ifndef TCM_METRICS_H
#define TCM_METRICS_H

#include "server.h"

/* /metrics connections at once: a scraper uses one at a time, a few
 * dashboards a few more; past it a connection is closed at once. */
#define TCM_METRICS_MAX_CONNS 64u
/* The descriptors they may hold: the port's pool and the socket's, with the
 * operator's reserve on the socket. */
#define TCM_METRICS_FDS (2u * TCM_METRICS_MAX_CONNS + TCM_CONTROL_OPERATOR_RESERVE)

/* The TCP port (srv->metrics_port). */
int tcm__metrics_start(tcm_server_t *srv);
/* The sweep of both, and the Unix socket (srv->metrics_socket, if set):
 * always, before tcm__metrics_start. */
int tcm__metrics_socket_start(tcm_server_t *srv);
/* Close every /metrics connection (tcmd is going away). */
void tcm__metrics_close(tcm_server_t *srv);

#endif
