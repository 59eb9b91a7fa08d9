/* stats.h — one snapshot of everything the daemon reports, shared by the
 * control socket (protobuf), tcmctl's tables and JSON, and /metrics, so the
 * names cannot drift. Main thread only. */
#ifndef TCM_STATS_H
#define TCM_STATS_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

typedef struct tcm_stat_row {
    char name[48]; /* snake_case; Prometheus adds the tcm_ prefix */
    const char *help;
    uint64_t value;
    double fvalue;
    bool is_float;
    bool counter;  /* monotonic (Prometheus _total) rather than a gauge */
} tcm_stat_row_t;

#define TCM_MAX_STAT_ROWS 96

/* Fills rows; returns how many. */
size_t tcm__stats_snapshot(tcm_server_t *srv, tcm_stat_row_t *rows, size_t max);
/* What a client's caches hold, read (clamped) from its channel. */
void tcm__client_usage(const tcm_server_t *srv, const tcm_client_t *c, uint32_t *threads, uint64_t *cached);
/* Upper bound of latency bucket i in microseconds (+Inf for the last). */
double tcm__latency_upper_us(unsigned i);

extern const char *const tcm__op_names[TCM_NOPS];

#endif
