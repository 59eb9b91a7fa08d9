/* metrics.h — the Prometheus endpoint (tcmd --metrics-port). */
#ifndef TCM_METRICS_H
#define TCM_METRICS_H

#include "server.h"

/* /metrics connections at once: a scraper uses one at a time, a few
 * dashboards a few more; past it a connection is closed at once. */
#define TCM_METRICS_MAX_CONNS 64u

int tcm__metrics_start(tcm_server_t *srv);

#endif
