/* lifecycle.h — attaching and detaching (lifecycle.c). */
#ifndef TCM_LIFECYCLE_H
#define TCM_LIFECYCLE_H

#include "client.h"

/* Added to the one line tcm_init prints when it cannot attach (the
 * drop-in: what the process does instead). */
extern TCM_HIDDEN const char *tcm__attach_failed_note;
/* Attach on first use: 0, or -errno when this process runs without tcmd. */
TCM_HIDDEN int tcm__ensure_attached(void);
/* Detach (tcm_shutdown, under attach_lock, attached, once the caches are
 * flushed): say Bye and close the connection. */
TCM_HIDDEN void tcm__detach_locked(void);

#endif
