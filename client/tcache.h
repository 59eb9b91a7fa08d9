/* tcache.h — the slow paths behind the thread cache (tcache.c). */
#ifndef TCM_CLIENT_TCACHE_H
#define TCM_CLIENT_TCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

TCM_HIDDEN void *tcm__malloc_slow(size_t size);
TCM_HIDDEN void tcm__free_slow(void *p);
/* The block realloc moved out of into a larger class (tcm.c, preload.c:
 * tcm__free_outgrown_fast), and what a bin keeps of those: past it the
 * bin goes back to tcmd whole (tcache.c). (16 KiB:
 * bench/preload/realloc_strings.c 15% slower, its bins going back where
 * the next strings need them, for 2% less of realloc_grow's peak.) */
TCM_HIDDEN void tcm__free_outgrown(void *p);
#define TCM_OUTGROWN_BYTES 65536u
TCM_HIDDEN void *tcm__large_alloc(size_t size, size_t align);
TCM_HIDDEN void *tcm__calloc_large(size_t size); /* size above TCM_MAX_SMALL; zeroed */
TCM_HIDDEN void tcm__flush_all(void);

#endif
