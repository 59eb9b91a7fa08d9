/* log.h — the daemon's log: one line per event, "syscall(args) failed:
 * reason" for failures, rate-limited where a client could flood it. */
#ifndef TCM_LOG_H
#define TCM_LOG_H

#include <stdint.h>
#include <stdio.h>

#include "prim.h" /* TCM_PRINTF */

enum tcm_log_level { TCM_LOG_ERROR = 0, TCM_LOG_WARN = 1, TCM_LOG_INFO = 2, TCM_LOG_DEBUG = 3 };

void tcm__log_open(FILE *f, int level);
int tcm__log_level(void);
void tcm__log_set_level(int level);
void tcm__log(int level, const char *fmt, ...) TCM_PRINTF(2, 3);
/* Like tcm__log but at most a few lines per second: tcmd's own repeated
 * warnings (never for lines a peer can trigger: see tcm__log_peer). */
void tcm__log_limited(int level, const char *fmt, ...) TCM_PRINTF(2, 3);
/* A line a client or peer can trigger (a refused request, a bad frame, a
 * connection over a cap): at most a few per source (its pid; 0 for a peer
 * not known yet) per 10 s window, and a bounded number from all sources, in
 * a budget apart from tcmd's own lines; a window that hid lines ends with
 * one line saying how many. Any thread. */
void tcm__log_peer(int level, long long source, const char *fmt, ...) TCM_PRINTF(3, 4);
#define TCM_LOG_PEER_UNKNOWN 0   /* a source for peers without a pid (a failed accept) */
#define TCM_LOG_PEER_METRICS (-1) /* one source for all /metrics peers (TCP: no pid) */
/* A source other than a pid: a user (the lines a process's arrival and
 * departure write: a fork loop has a new pid each time). */
long long tcm__log_source_uid(uint32_t uid);
/* tcm__log_peer with a text for its source (an executable: what departed
 * processes of one program left), which the summary line names. */
void tcm__log_peer_text(int level, const char *text, const char *fmt, ...) TCM_PRINTF(3, 4);
/* Ends the windows that are over (their suppressed counts are printed even
 * when their source went quiet); the main loop calls it every second. */
void tcm__log_peer_tick(void);

#endif
