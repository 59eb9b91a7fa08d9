/* tcache.h — the slow paths behind the thread cache (tcache.c). */
#ifndef TCM_CLIENT_TCACHE_H
#define TCM_CLIENT_TCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

extern TCM_HIDDEN TCM_TLS tcm_thread_t *tcm__tls_thread;
TCM_HIDDEN void *tcm__malloc_slow(size_t size);
TCM_HIDDEN void tcm__free_slow(void *p);
TCM_HIDDEN void *tcm__large_alloc(size_t size, size_t align);
TCM_HIDDEN void tcm__flush_all(void);
TCM_HIDDEN void tcm__thread_reset_after_fork(void);

#endif
