/* reconnect.h — riding through a tcmd restart (reconnect.c). */
#ifndef TCM_CLIENT_RECONNECT_H
#define TCM_CLIENT_RECONNECT_H

#include <stdbool.h>
#include <stdint.h>

#include "client.h"

/* How long to wait for a tcmd that is restarting, in nanoseconds. */
TCM_HIDDEN uint64_t tcm__reconnect_timeout_ns(void);
/* tcmd went away (its socket closed): reconnect to the one now on the same
 * socket as the same client. 0 when connected (again), -EAGAIN while still
 * waiting, another -errno when this process must give up. */
TCM_HIDDEN int tcm__await_daemon(void);
/* Our control socket was hung up, or is not ours any more (takes
 * conn_lock). */
TCM_HIDDEN bool tcm__daemon_gone(void);

#endif
