/* heapthread.h — the heap thread (heapthread.c). */
#ifndef TCM_HEAPTHREAD_H
#define TCM_HEAPTHREAD_H

#include "server.h"

int tcm__heap_thread_start(tcm_server_t *srv);
void tcm__heap_thread_stop(tcm_server_t *srv);
void tcm__heap_kick(tcm_server_t *srv);
void tcm__heap_run_command_ht(tcm_server_t *srv); /* the posted mailbox command, if any */

#endif
