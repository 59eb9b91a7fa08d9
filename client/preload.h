/* preload.h — what libtcm-malloc.so's C++ operators (preload_new.cpp) take
 * from its C side (preload.c). */
#ifndef TCM_PRELOAD_H
#define TCM_PRELOAD_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* operator new and new[]: malloc's hit inline, and for everything else
 * tcm__new_missed (preload_new.cpp: malloc, the new_handler,
 * std::bad_alloc) */
__attribute__((visibility("hidden"))) void *tcm__preload_new(size_t size);
__attribute__((visibility("hidden"))) void *tcm__new_missed(size_t size);
/* operator delete's every form: free, bound inside the library */
__attribute__((visibility("hidden"))) void tcm__preload_free(void *p);
/* aligned_alloc's path for an alignment above 16, as the drop-in serves it */
__attribute__((visibility("hidden"))) void *tcm__preload_aligned(size_t align, size_t size);
/* a function of the program's C++ runtime by its mangled name (one a
 * library loaded with RTLD_LOCAL included); NULL without one */
__attribute__((visibility("hidden"))) void *tcm__cxx_runtime_symbol(const char *name);

#ifdef __cplusplus
}
#endif

#endif
