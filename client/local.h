/* local.h — the drop-in's private heap (local.c, libtcm-malloc.so only). */
#ifndef TCM_LOCAL_H
#define TCM_LOCAL_H

#include "client.h"

/* This process's malloc uses a private heap of its own, made at its first
 * allocation, instead of tcmd's shared one. */
TCM_HIDDEN void tcm__local_use(void);

#endif
