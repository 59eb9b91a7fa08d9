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
/* A view that read the clients off the main loop is made (one per
 * srv->views_busy taken): reaped clients may be freed once none is left. */
void tcm__views_done(tcm_server_t *srv);

#endif
