/* migrate.h — an adopted heap's state segment brought to this tcmd's
 * layout (migrate.c). */
#ifndef TCM_MIGRATE_H
#define TCM_MIGRATE_H

#include "server.h"

/* After the segments are open, before anything reads the state segment's
 * newer fields: migrate an adopted heap of an older state version (logged)
 * and sign the heap as served by this tcmd. 0, or -1 (logged) when a
 * migration step is missing. */
int tcm__state_upgrade(tcm_server_t *srv);

#endif
