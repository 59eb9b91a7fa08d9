/*
 * tcm.h — a shared-memory heap for multi-process servers.
 *
 * Every process attached to the same tcmd allocates from and frees into one
 * heap, mapped at the same address everywhere: a pointer from tcm_malloc in
 * one process is valid, and may be freed, in every other attached process.
 * Per-thread caches make the common malloc/free a few instructions; the
 * daemon owns the shared tiers.
 *
 * The first call attaches to the daemon on $TCM_SOCKET, or the default
 * socket ($XDG_RUNTIME_DIR/tcm/tcmd.sock, else /tmp/tcm-UID/tcmd.sock).
 * Allocation calls return NULL with errno = ENOMEM when the heap limit is
 * reached, when the process's user holds its quota (tcmctl quota), or no
 * daemon can be reached. Freeing a pointer that is not from
 * the heap is a fatal error, as in glibc.
 */
#ifndef TCM_H
#define TCM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TCM_API_ATTR
#define TCM_MALLOC_ATTR __attribute__((malloc))
#elif defined(__GNUC__)
#define TCM_API_ATTR __attribute__((visibility("default")))
#define TCM_MALLOC_ATTR __attribute__((malloc))
#else
#define TCM_API_ATTR
#define TCM_MALLOC_ATTR
#endif
#ifndef TCM_API /* (libtcm-malloc.so keeps its own copies of these hidden: client/dropin_names.h) */
#define TCM_API TCM_API_ATTR
#endif

/* Attach explicitly. socket_path NULL: $TCM_SOCKET, else the default.
 * Returns 0 or -errno (-ENOENT/-ECONNREFUSED: no daemon; -EEXIST: the heap's
 * address range is taken in this process; -EPERM: the socket is served by a
 * user this process does not trust, see TCM_DAEMON_UID). Attached already:
 * 0 for NULL or the socket path it attached with, -EBUSY for another (a
 * process is one tcmd's client at a time: tcm_shutdown first). */
TCM_API int tcm_init(const char *socket_path);

/* Flush every cache of this process back to the daemon and detach. Call it
 * when no other thread of the process uses tcm any more. */
TCM_API void tcm_shutdown(void);

TCM_API TCM_MALLOC_ATTR void *tcm_malloc(size_t size);
TCM_API TCM_MALLOC_ATTR void *tcm_calloc(size_t n, size_t size);
TCM_API void *tcm_realloc(void *p, size_t size);
TCM_API TCM_MALLOC_ATTR void *tcm_aligned_alloc(size_t alignment, size_t size);
TCM_API void tcm_free(void *p);
TCM_API void tcm_free_sized(void *p, size_t size);
TCM_API size_t tcm_usable_size(const void *p);

/* Positions in the heap, for apps that store offsets rather than pointers.
 * NULL <-> 0; a pointer outside the heap gives UINT64_MAX; an offset outside
 * the heap gives NULL. */
TCM_API uint64_t tcm_to_offset(const void *p);
TCM_API void *tcm_from_offset(uint64_t off);

/* A root's name: 1 to TCM_ROOT_NAME_MAX - 1 bytes (the NUL makes it
 * TCM_ROOT_NAME_MAX). */
#define TCM_ROOT_NAME_MAX 48

/* Named shared pointers kept by the daemon (names: TCM_ROOT_NAME_MAX), in a
 * table of tcmd's `roots` setting; a root counts in the share of the user
 * who created it (tcmd's `roots_per_uid`) until it is removed, and only
 * that user (or root, or tcmd's user) may change it. Each is a release: a
 * process that reads the pointer with tcm_root_get (an acquire) sees what
 * the setter wrote before it. Each returns 0 or -errno: -EINVAL (bad name,
 * a pointer outside the heap), -ENOSPC (table full), -EDQUOT (the user
 * holds its share), -EPERM (another user's root), -ENOTCONN (no tcmd).
 * tcm_root_set: whatever the name held; p NULL removes the name.
 * tcm_root_create: only a name that is not there (-EEXIST otherwise), so
 * that one of several processes that race to publish wins.
 * tcm_root_replace: only if the name holds expected (NULL: the name is
 * absent), atomically; -EAGAIN when it held something else. desired NULL
 * removes it. */
TCM_API int tcm_root_set(const char *name, void *p);
TCM_API int tcm_root_create(const char *name, void *p);
TCM_API int tcm_root_replace(const char *name, void *expected, void *desired);
TCM_API void *tcm_root_get(const char *name);

/* One heap-wide figure by its name in `tcmctl stats`, any of them, as fresh
 * as tcmctl's: those tcmd keeps current in shared memory (bytes_clients,
 * clients_attached, requests, ...) are read there without a round trip,
 * the others (bytes_committed, bytes_in_use, uptime_seconds, ...) asked of
 * tcmd; a ratio (fragmentation_ratio) comes in thousandths. Like any call,
 * it attaches first if the process is not attached. Returns 0 or -errno
 * (-ENOENT: no such figure; -ENOTCONN: tcmd went away and did not come back
 * within its reconnect timeout, so allocations that need it fail with
 * ENOMEM). */
TCM_API int tcm_stat(const char *name, uint64_t *value);

#ifdef __cplusplus
}
#endif

#endif
