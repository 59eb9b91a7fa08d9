/* diag.h — what libtcm says on stderr (diag.c). */
#ifndef TCM_DIAG_H
#define TCM_DIAG_H

#include "client.h"

TCM_HIDDEN void tcm__fatal(const char *fmt, ...) __attribute__((noreturn)) TCM_PRINTF(1, 2);
TCM_HIDDEN void tcm__warn_once(const char *what);
/* A line on stderr only when TCM_VERBOSE is set: routine events (a tcmd
 * restart ridden through) stay out of the application's output. */
TCM_HIDDEN void tcm__note(const char *fmt, ...) TCM_PRINTF(1, 2);

#endif
