/* validate.h — the whole-heap validator (validate.c). */
#ifndef TCM_VALIDATE_H
#define TCM_VALIDATE_H

#include <stddef.h>

#include "server.h"

/* The whole-heap validator. TCM_VALID, or the first
 * inconsistency in why: of tcmd's own structures (TCM_INVALID_HEAP, a bug
 * or a corrupt segment), or of a client's caches listing something it may
 * not hold (TCM_INVALID_CLIENT: a tcmd bug, or a client that wrote garbage
 * there, which costs only that client). Bounded in time whatever clients
 * write (validate.c). */
enum { TCM_VALID = 0, TCM_INVALID_HEAP = 1, TCM_INVALID_CLIENT = 2 };
int tcm__validate_ht(tcm_server_t *srv, char *why, size_t whylen);

#endif
