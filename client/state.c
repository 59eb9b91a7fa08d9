/* state.c — the process's state: the hot globals the inlined malloc and
 * free read (written under the attach lock), each thread's cache and record
 * pointers, and tcm__proc, which the slow paths share. */
#include "client.h"

_Atomic uintptr_t tcm__heap_base;
_Atomic uint64_t tcm__heap_bytes;
_Atomic uint64_t tcm__heap_granules;
const uint8_t *_Atomic tcm__page_class;
tcm_proc_t tcm__proc = {
    .attach_lock = PTHREAD_MUTEX_INITIALIZER,
    .conn_lock = PTHREAD_MUTEX_INITIALIZER,
    .large_lock = PTHREAD_MUTEX_INITIALIZER,
    .tcache_lock = PTHREAD_MUTEX_INITIALIZER,
    .spare_lock = PTHREAD_MUTEX_INITIALIZER,
    .sock = -1,
};

TCM_TLS tcm_tls_hot_t tcm__hot = {&tcm__empty_tcache, 0};
TCM_TLS tcm_thread_t *tcm__tls_thread;
TCM_TLS unsigned tcm__in_library;
tcm_tcache_t tcm__empty_tcache;
