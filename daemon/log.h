/* log.h — the daemon's log: one line per event, "syscall(args) failed:
 * reason" for failures, rate-limited where a client could flood it. */
#ifndef TCM_LOG_H
#define TCM_LOG_H

#include <stdio.h>

#include "prim.h" /* TCM_PRINTF */

enum tcm_log_level { TCM_LOG_ERROR = 0, TCM_LOG_WARN = 1, TCM_LOG_INFO = 2, TCM_LOG_DEBUG = 3 };

void tcm__log_open(FILE *f, int level);
int tcm__log_level(void);
void tcm__log_set_level(int level);
void tcm__log(int level, const char *fmt, ...) TCM_PRINTF(2, 3);
/* Like tcm__log but at most a few lines per second per call site family. */
void tcm__log_limited(int level, const char *fmt, ...) TCM_PRINTF(2, 3);

#endif
