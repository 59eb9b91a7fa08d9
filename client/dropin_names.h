/* dropin_names.h — force-included into every C file of libtcm-malloc.so
 * (CMakeLists.txt). The drop-in's own copies of the tcm_* functions get
 * names of their own and stay inside it: preload.c exports tcm_* as
 * wrappers that send a program's calls to libtcm.so's when the drop-in's
 * heap is the process's private one (a program that links libtcm shares
 * memory through it), and to these otherwise. */
#ifndef TCM_DROPIN_NAMES_H
#define TCM_DROPIN_NAMES_H

#define TCM_API __attribute__((visibility("hidden")))
#define TCM_DROPIN 1 /* the library's own allocations are the system malloc's (client.h) */
#define TCM_DROPIN_NAMES(X)                                                                        \
    X(init) X(shutdown) X(malloc) X(calloc) X(realloc) X(aligned_alloc) X(free) X(free_sized)         \
    X(usable_size) X(to_offset) X(from_offset) X(root_set) X(root_create) X(root_replace) X(root_get) \
    X(stat)
#define tcm_init tcm__own_init
#define tcm_shutdown tcm__own_shutdown
#define tcm_malloc tcm__own_malloc
#define tcm_calloc tcm__own_calloc
#define tcm_realloc tcm__own_realloc
#define tcm_aligned_alloc tcm__own_aligned_alloc
#define tcm_free tcm__own_free
#define tcm_free_sized tcm__own_free_sized
#define tcm_usable_size tcm__own_usable_size
#define tcm_to_offset tcm__own_to_offset
#define tcm_from_offset tcm__own_from_offset
#define tcm_root_set tcm__own_root_set
#define tcm_root_get tcm__own_root_get
#define tcm_root_create tcm__own_root_create
#define tcm_root_replace tcm__own_root_replace
#define tcm_stat tcm__own_stat

#endif
