/* recovery.h — making an adopted heap consistent (recovery.c). */
#ifndef TCM_RECOVERY_H
#define TCM_RECOVERY_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

/* Make an adopted heap consistent before any thread runs. */
int tcm__recover(tcm_server_t *srv);

#endif
