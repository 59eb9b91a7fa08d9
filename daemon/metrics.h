/* metrics.h — the Prometheus endpoint (tcmd --metrics-port). */
#ifndef TCM_METRICS_H
#define TCM_METRICS_H

#include "server.h"

int tcm__metrics_start(tcm_server_t *srv);

#endif
