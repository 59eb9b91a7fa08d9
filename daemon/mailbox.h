/* mailbox.h — the main loop's commands for the heap thread (mailbox.c). */
#ifndef TCM_MAILBOX_H
#define TCM_MAILBOX_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

enum tcm_mbox_cmd {
    TCM_MBOX_NONE = 0, TCM_MBOX_RELEASE = 1, TCM_MBOX_RESIZE = 2, TCM_MBOX_NOP = 3, TCM_MBOX_CHECK = 4,
};

/* Commands for the heap thread, from the main loop. done runs on
 * the main loop once the heap thread has run cmd (rc 0, its result and, for
 * CHECK, its text), or when timeout_ms (< 0: none) passed first
 * (-ETIMEDOUT), or at shutdown (-ECANCELED); exactly once. */
typedef void (*tcm_mbox_done_t)(tcm_server_t *srv, void *arg, int rc, uint64_t result, const char *text);
void tcm__mailbox_post(tcm_server_t *srv, int cmd, uint64_t arg, int timeout_ms, tcm_mbox_done_t done, void *ctx);
/* The same, posted once ready(srv, ctx) holds or after wait_ms (release
 * waits for the processes' flushes this way). */
void tcm__mailbox_post_when(tcm_server_t *srv, int cmd, uint64_t arg, int timeout_ms,
                            bool (*ready)(tcm_server_t *srv, void *ctx), int wait_ms, tcm_mbox_done_t done, void *ctx);
/* wake tells the heap thread a command is posted (tcm__heap_kick). */
void tcm__mailbox_start(tcm_server_t *srv, void (*wake)(tcm_server_t *srv));
void tcm__mailbox_cancel(tcm_server_t *srv); /* after the heap thread stopped */

#endif
