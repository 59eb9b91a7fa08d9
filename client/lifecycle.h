/* lifecycle.h — attaching and detaching (lifecycle.c). */
#ifndef TCM_LIFECYCLE_H
#define TCM_LIFECYCLE_H

#include "client.h"

/* Added to the one line tcm_init prints when it cannot attach (the
 * drop-in: what the process does instead). */
extern TCM_HIDDEN const char *tcm__attach_failed_note;
/* Attach on first use: 0, or -errno when this process runs without tcmd. */
TCM_HIDDEN int tcm__ensure_attached(void);
/* What attaching on first use does instead of tcm_init (the drop-in's
 * private heap: client/local.c); called under attach_lock. NULL: tcm_init. */
extern TCM_HIDDEN int (*tcm__attach_first)(void);
/* Use a private heap laid out in this process's own memory (heap, its
 * metadata, a channel for max_threads): the requests posted on the channel
 * are answered by serve(), and tick() is called by the background thread. */
TCM_HIDDEN int tcm__attach_private(uint8_t *heap, uint64_t heap_size, const tcm_meta_hdr_t *meta,
                                   uint64_t meta_size, uint8_t *chan, uint32_t max_threads, void (*serve)(void),
                                   void (*tick)(uint64_t));
/* Detach (tcm_shutdown, under attach_lock, attached, once the caches are
 * flushed): say Bye and close the connection. */
TCM_HIDDEN void tcm__detach_locked(void);

#endif
