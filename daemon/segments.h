/* segments.h — the daemon's shared-memory segments and each client's
 * channel and record (segments.c). */
#ifndef TCM_SEGMENTS_H
#define TCM_SEGMENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

int tcm__segments_open(tcm_server_t *srv);     /* create, or adopt what a previous tcmd left */
void tcm__segments_close(tcm_server_t *srv);   /* unlinks them unless keep_segments */
/* A new client for process pid (the kernel's, from SO_PEERCRED): -ESRCH
 * when that process has already gone, -EMFILE when the table is full. */
int tcm__client_create(tcm_server_t *srv, tcm_handle_t sock, tcm_pid_t pid, tcm_uid_t uid, tcm_client_t **out);
int tcm__client_map(tcm_server_t *srv, uint32_t index, tcm_client_t **out); /* an adopted record */
void tcm__client_destroy(tcm_server_t *srv, tcm_client_t *c);              /* unlinks, frees the record */
void tcm__client_unmap(tcm_server_t *srv, tcm_client_t *c);                /* keeps both */
bool tcm__client_alive(tcm_client_t *c); /* its process is still running (any thread) */
/* The header and ring of a new channel at c->chan, laid out as c->lay. */
void tcm__channel_init(tcm_client_t *c);


/* The slot, or NULL when it cannot be backed (index out of range, /dev/shm
 * full). Heap thread (and recovery). */
tcm_slot_t *tcm__client_slot(tcm_client_t *c, uint32_t index);
/* Ask the client's process to give back what it caches (its background
 * thread empties the transfer tier and page-run cache, then stores the
 * returned generation in flush_ack; its threads empty their bins at their
 * next slow path). Any thread of tcmd. */
uint32_t tcm__client_ask_flush(tcm_client_t *c);

#endif
