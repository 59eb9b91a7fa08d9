/* fork.h — fork handling (fork.c). */
#ifndef TCM_FORK_H
#define TCM_FORK_H

#include "client.h"

/* Once per process, before the first attach. */
TCM_HIDDEN void tcm__fork_handlers_install(void);

#endif
