/* tcache.h — the slow paths behind the thread cache (tcache.c). */
#ifndef TCM_CLIENT_TCACHE_H
#define TCM_CLIENT_TCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

TCM_HIDDEN void *tcm__malloc_slow(size_t size);
TCM_HIDDEN void tcm__free_slow(void *p);
TCM_HIDDEN void *tcm__large_alloc(size_t size, size_t align);
TCM_HIDDEN void tcm__flush_all(void);

#endif
