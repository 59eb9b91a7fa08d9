/* control.h — the main loop's control side (control.c): the client watch,
 * the mailbox and the control socket, started and closed together. Main
 * thread only. */
#ifndef TCM_CONTROL_H
#define TCM_CONTROL_H

#include "server.h"

int tcm__control_start(tcm_server_t *srv);
/* After the heap thread stopped: answer what waits for it, close every
 * connection and handle, and leave the socket file as the next tcmd needs. */
void tcm__control_close(tcm_server_t *srv);

#endif
