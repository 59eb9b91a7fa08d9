/* clientwatch.h — the main thread's side of a client's life
 * (clientwatch.c). Main thread only. */
#ifndef TCM_CLIENTWATCH_H
#define TCM_CLIENTWATCH_H

#include "server.h"
#include "transport.h"

/* Watch the process of a new or adopted client (its end marks it DEAD);
 * mark a client whose process ended or that detached DEAD. */
void tcm__client_watch(tcm_server_t *srv, tcm_client_t *c);
void tcm__client_gone(tcm_server_t *srv, tcm_client_t *c);
/* A connection is closing (the transport's closed callback): its client,
 * if any, loses it. If it said Bye, or its process has ended, it is gone;
 * a living process is kept and asked to reconnect. */
void tcm__client_conn_closed(tcm_conn_t *conn);
/* The liveness timer, the watches of adopted clients and the wakeup for
 * reaped ones; at close, free what the heap thread reaped last. */
void tcm__clientwatch_start(tcm_server_t *srv);
void tcm__clientwatch_drain(tcm_server_t *srv);
/* A view that reads the clients off the main loop (on libuv's thread
 * pool) begins: false if one of that kind is in flight already (then wait
 * for it). The clients reaped meanwhile are freed only once every view
 * that began before they left the table has ended. */
bool tcm__view_begin(tcm_server_t *srv, enum tcm_view_kind kind);
void tcm__view_end(tcm_server_t *srv, enum tcm_view_kind kind);

#endif
