/* prim.h — the platform layer. Every OS call tcm makes lives behind these
 * functions: prim_linux.c (POSIX shm, futexes, unix sockets) and
 * prim_win.c (file mappings, named events, named pipes; DESIGN.md, "The
 * Windows backend"). Errors are returned as -errno. */
#ifndef TCM_PRIM_H
#define TCM_PRIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* FILE, for tcm__log_file_open */
#include <pthread.h> /* winpthreads under mingw-w64 */

/* Identities and handles of the platform's own, so no caller needs a POSIX
 * header. A handle is an open OS object: a descriptor on Linux, a HANDLE's
 * 32-bit value on Windows (HandleToLong: kernel handles fit in 32 bits so
 * that 32- and 64-bit processes can share them). Functions that open one
 * return it or -errno, so it stays a signed int. */
typedef int tcm_handle_t;
typedef int32_t tcm_pid_t;  /* a process id */
typedef uint32_t tcm_uid_t; /* a user: the uid; on Windows the RID of the user's SID */
typedef uint32_t tcm_gid_t; /* a group: the gid; on Windows the RID of the group's SID */

/* printf-like functions; mingw's C99 printf (__USE_MINGW_ANSI_STDIO) is GNU's. */
#ifdef _WIN32
#define TCM_PRINTF(fmt, first) __attribute__((format(gnu_printf, fmt, first)))
#else
#define TCM_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#endif

/* Shared-memory objects. */
tcm_handle_t tcm__shm_create(const char *name, uint64_t size, unsigned mode); /* handle or -errno */
tcm_handle_t tcm__shm_open(const char *name, bool writable);                  /* handle or -errno */
int tcm__shm_unlink(const char *name);
/* Give a file (a socket, its directory) to a group, with mode. */
int tcm__path_share(const char *path, tcm_gid_t gid, unsigned mode);
/* A group's id from its name or number; -ENOENT if there is none. */
int tcm__group_id(const char *name, tcm_gid_t *gid);
/* A user's id from its name or number; -ENOENT if there is none. */
int tcm__user_id(const char *name, uint32_t *uid);
void tcm__close(tcm_handle_t fd);

/* Map fd at exactly `at` (MAP_FIXED_NOREPLACE) or anywhere (at == NULL).
 * On failure returns NULL and writes a message naming the clash to err. */
void *tcm__map(tcm_handle_t fd, uint64_t size, void *at, bool writable, char *err, size_t errlen);
void tcm__unmap(void *p, uint64_t size);
/* Private zero-filled memory that only costs what is touched; NULL on failure. */
void *tcm__reserve(uint64_t size);

/* Backing store of a heap range: commit before handing pages out, so a full
 * /dev/shm is ENOMEM rather than SIGBUS; release so tmpfs really frees. */
int tcm__commit(tcm_handle_t fd, uint64_t off, uint64_t len);
int tcm__release(tcm_handle_t fd, uint64_t off, uint64_t len);
/* The pages of [addr, addr + len) of a private mapping go back to the OS.
 * 0 or -errno. */
int tcm__discard(void *addr, uint64_t len);
/* Whether pages tcm__release or tcm__discard gave back read zero when next
 * touched (a hole punched in tmpfs, MADV_DONTNEED on private memory); not
 * where the system may keep their old contents (Windows' MEM_RESET). */
bool tcm__released_reads_zero(void);
/* Back [addr, addr + len) of a shared mapping now: -ENOMEM on a full
 * /dev/shm instead of a SIGBUS at the first write. */
int tcm__populate(void *addr, uint64_t len);
int64_t tcm__backed_bytes(tcm_handle_t fd); /* allocated blocks of the object (Windows: committed bytes) */
/* Make the kernel back [addr, addr + len) of a shared mapping, 2 MiB
 * aligned, with large pages now (Linux 6.1+: MADV_COLLAPSE; the pages
 * stay large for every process that maps them). 0 or -errno (-EINVAL:
 * this kernel cannot; -ENOSYS: no such thing on this system). */
int tcm__collapse(void *addr, uint64_t len);
/* Bytes of the mapping that starts at addr which this process maps with
 * large pages (Linux: its ShmemPmdMapped); -errno when unknown. */
int64_t tcm__huge_mapped_bytes(const void *addr);
/* Bytes of [addr, addr + len) with physical memory behind them: in the
 * page cache on Linux, in this process's working set on Windows. */
int64_t tcm__resident_bytes(const void *addr, uint64_t len);
/* 1 when [off, off + len) of the object has no hole, 0 when it has one,
 * -errno on failure. */
int tcm__backed_range(tcm_handle_t fd, uint64_t off, uint64_t len);
/* Size and owner of a shared-memory object. */
int tcm__shm_stat(tcm_handle_t fd, uint64_t *size, tcm_uid_t *uid, unsigned *mode);
/* Cut a segment back to size (what lies beyond is dropped). 0 or -errno. */
int tcm__shm_cut(tcm_handle_t fd, uint64_t size);

/* Wakeups on a 32-bit word in shared memory (futex, not process-private).
 * A word has one waiter at a time, which never wakes it itself (a slot's
 * thread, the heap thread, a background thread): the Windows backend's
 * event per word relies on it. */
int tcm__wait(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns);
void tcm__wake(_Atomic uint32_t *word, int n);

/* An exclusive lock held for the life of the process: one daemon per name. */
tcm_handle_t tcm__lock_name(const char *name); /* handle (keep open) or -errno */
/* A client's liveness is its process, never a descriptor it could close.
 * tcm__proc_watch opens a watch on process pid (Linux: a pidfd; Windows: a
 * process handle) and reads the process's start time, which a later
 * process that reuses the pid does not have: handle or -errno (-ESRCH: no
 * such process). tcm__proc_exited: the watched process has ended (never
 * blocks). A pollable watch (Linux) becomes readable when it ends. */
tcm_handle_t tcm__proc_watch(tcm_pid_t pid, uint64_t *start);
/* The same for the peer of a connected control socket (pid from
 * tcm__peer_cred), from the connection itself where the OS can (Linux
 * 6.5+: SO_PEERPIDFD), so that a pid reused since connect() is not taken
 * for the peer. */
tcm_handle_t tcm__peer_proc_watch(tcm_handle_t sockfd, tcm_pid_t pid, uint64_t *start);
/* Whether process pid maps the shared-memory object shm_name (as given to
 * tcm__shm_create): 1 or 0, or -errno where that cannot be told (another
 * user's process, a platform without /proc/PID/maps: -ENOSYS; more
 * mappings than tcmd reads: -E2BIG). */
int tcm__proc_maps_shm(tcm_pid_t pid, const char *shm_name);
bool tcm__proc_exited(tcm_handle_t watch);
bool tcm__proc_watch_pollable(void);
/* Process pid's short name (Linux: comm) and executable path, each cut to
 * fit (a path keeps its end, its most telling part), control characters
 * as '?'; "" where unknown. */
void tcm__proc_names(tcm_pid_t pid, char *comm, size_t commlen, char *exe, size_t exelen);

/* Which open file a descriptor is, so that a library can tell its own
 * descriptor from one the application closed and reused the number of. */
typedef struct tcm_file_id {
    uint64_t dev, ino;
} tcm_file_id_t;
int tcm__file_id(tcm_handle_t fd, tcm_file_id_t *id); /* 0 or -errno */
bool tcm__file_is(tcm_handle_t fd, const tcm_file_id_t *id); /* fd still names that file */

/* Fault zones: a shared mapping whose object another process can shrink or
 * punch (a client's channel, the heap). A SIGBUS inside a zone does not
 * kill tcmd: the zone is replaced by private zero pages, *tripped is set,
 * and the faulting access goes on, reading zeros. Every reader of a zone
 * already treats its contents as untrusted, so zeros are just one more
 * garbage value; whoever owns the zone then sees *tripped and cuts the
 * client off. A SIGBUS outside every zone kills the process as before.
 * tcm__fault_zones_init installs the handler (tcmd, once). add: a zone id
 * or -ENOSPC; remove it before unmapping. */
int tcm__fault_zones_init(void);
int tcm__fault_zone_add(void *lo, uint64_t len, _Atomic uint32_t *tripped);
void tcm__fault_zone_remove(int id);
/* Read len bytes at off of a shared-memory object, mapped at `mapped`,
 * without touching the mapping: a hole reads as zeros and costs no memory,
 * a range beyond the end reads as zeros (a shrunk object), never a signal
 * (Linux: pread; Windows, where a mapped section cannot shrink: a copy
 * from the mapping). 0 or -errno. */
int tcm__read_at(tcm_handle_t fd, const void *mapped, uint64_t off, void *buf, uint64_t len);
/* Keep the object behind fd in existence while process pid lives, giving
 * it no access: on Windows a name goes with its last handle, so tcmd leaves
 * one of no access rights in each client and the heap's segments outlive
 * tcmd; nothing on Linux, where they have names in /dev/shm. 0 or -errno. */
int tcm__keep_alive_in(tcm_handle_t fd, tcm_pid_t pid);

/* A control socket: tcmd binds it under tcm__socket_bind_name(path) and
 * then publishes it at path, so that on Linux the path (a unix socket file)
 * never disappears during a restart; on Windows both name the named pipe
 * of path. 0 or -errno. */
int tcm__socket_bind_name(const char *path, char *out, size_t len);
int tcm__socket_publish(const char *bound, const char *path);
/* Connect to the control socket of path; handle or -errno. A server whose
 * backlog stays full (stopped, or flooded) makes the connect wait at most
 * TCM_CONNECT_TIMEOUT_MS, then -ETIMEDOUT. */
#define TCM_CONNECT_TIMEOUT_MS 2000
tcm_handle_t tcm__connect(const char *path);
int tcm__peer_cred(tcm_handle_t sockfd, tcm_pid_t *pid, tcm_uid_t *uid, tcm_gid_t *gid);
/* The peer of a connected stream socket has gone (EOF, hang-up or error);
 * never blocks. */
bool tcm__socket_hung_up(tcm_handle_t sockfd);
/* Is gid the primary or a supplementary group of the socket's peer? */
bool tcm__peer_in_group(tcm_handle_t sockfd, tcm_gid_t primary, tcm_gid_t gid);
/* Whether descriptors travel with control frames (Linux: SCM_RIGHTS).
 * Where they do not (Windows), tcmd's Welcome goes as any reply and the
 * client opens the segments by the names it carries. */
bool tcm__handles_travel(void);
/* Send len bytes and, with the first of them, nfds descriptors
 * (SCM_RIGHTS), in one go on a non-blocking socket: 0, or -errno
 * (-EAGAIN when the socket buffer cannot take it all now); -EOPNOTSUPP
 * where descriptors do not travel. */
int tcm__send_with_fds(tcm_handle_t sockfd, const void *buf, size_t len, const tcm_handle_t *fds, int nfds);
/* Receive up to len bytes; descriptors that came with them (close-on-exec)
 * are added to fds[*nfds..maxfds), extra ones are closed. Bytes read, or
 * -errno; 0 at EOF. */
long tcm__recv_with_fds(tcm_handle_t sockfd, void *buf, size_t len, tcm_handle_t *fds, int maxfds, int *nfds);
/* All len bytes, blocking (no SIGPIPE); 0 or -errno. */
int tcm__send_all(tcm_handle_t sockfd, const void *buf, size_t len);
/* Exactly len bytes within timeout_ms of each read (< 0: forever),
 * collecting descriptors as tcm__recv_with_fds does (fds may be NULL): 0,
 * -ETIMEDOUT, -ECONNRESET at EOF, or -errno. */
int tcm__recv_all(tcm_handle_t sockfd, void *buf, size_t len, int timeout_ms, tcm_handle_t *fds, int maxfds, int *nfds);
/* Leave a unix socket file at path that nobody listens on: connecting
 * gives ECONNREFUSED, which clients read as "tcmd is restarting". */
int tcm__socket_placeholder(const char *path);
/* Go to the background. In the parent: the child's pid once it has called
 * tcm__detach_ready, -ECHILD if it gave up first, or -errno. In the child:
 * 0, in a session of its own, stdin and stdout on /dev/null, stderr on
 * log_fd, with *ready for tcm__detach_ready. */
tcm_pid_t tcm__detach(tcm_handle_t log_fd, tcm_handle_t *ready);
void tcm__detach_ready(tcm_handle_t ready);
uint64_t tcm__now_ns(void);
uint64_t tcm__thread_cpu_ns(void); /* CPU time the calling thread has used */
uint64_t tcm__random64(void);        /* unpredictable, for resume tokens */
void tcm__sleep_ns(uint64_t ns);
void tcm__yield(void); /* let another thread run */
/* The calling thread's id, for tcm__thread_set_nice from any thread. */
uint64_t tcm__thread_id(void);
/* A thread's scheduling priority as a nice value (-20 highest, 19 lowest;
 * Windows maps it onto its five thread priorities); 0 or -errno (-EPERM:
 * raising it needs a privilege, CAP_SYS_NICE or RLIMIT_NICE on Linux). */
int tcm__thread_set_nice(uint64_t tid, int nice);
/* "YYYY-MM-DD HH:MM:SS.mmm", local time, for log lines. */
void tcm__wall_clock(char *buf, size_t len);
/* "YYYY-MM-DD HH:MM:SS", local time, of a time in seconds since 1970. */
void tcm__format_time(uint64_t secs, char *buf, size_t len);

/* The process, its user, its files. */
uint32_t tcm__pid(void);
tcm_uid_t tcm__uid(void);     /* effective: whose segments and socket these are */
tcm_uid_t tcm__login_uid(void); /* real: whose default socket directory */
/* A set-user-ID (or otherwise secure-execution) process: its environment
 * is its caller's, not to be trusted (Linux: AT_SECURE). */
bool tcm__secure_exec(void);
/* getenv, NULL for every name in a secure-execution process. */
const char *tcm__env(const char *name);
/* Read a small configuration file only root can have written (owned by
 * root, not writable by group or others, not a link): its bytes, NUL
 * terminated, or -errno (-EPERM: another owner or mode). */
int tcm__read_root_file(const char *path, char *buf, size_t len);
bool tcm__path_exists(const char *path);
bool tcm__is_terminal(tcm_handle_t fd);
/* path made absolute, links resolved (SIGHUP rereads it after a chdir); 0 or -errno. */
int tcm__absolute_path(const char *path, char *out, size_t len);
int tcm__unlink(const char *path); /* 0 or -errno; a path that is not there is 0 */
/* Make dir and any missing parents, each with mode: 1 made, 0 there already, -errno. */
int tcm__make_dirs(const char *dir, unsigned mode);
unsigned tcm__umask(unsigned mask); /* the previous mask */
void tcm__ignore_sigpipe(void);     /* a write to a closed socket is an error, not a signal */
/* Hold (true) or let through (false) SIGTERM, SIGINT and SIGHUP in the
 * calling thread. Threads it starts while holding them inherit the hold, so
 * the signals reach only the thread that lets them through, once it has its
 * handlers: none is lost before they are installed, and none waits on a
 * thread asleep in a raw futex (as the sanitizers' deferred delivery would). */
void tcm__stop_signals_hold(bool hold);
/* Raise the soft limit on open descriptors to want, or as far as the hard
 * limit allows; *now is the soft limit after (UINT64_MAX: none). 0 or
 * -errno (the limit could not be read or set). */
int tcm__fd_limit_raise(uint64_t want, uint64_t *now);
/* Handlers around fork (pthread_atfork); nothing where there is no fork. */
int tcm__at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
/* The definition of a symbol in the libraries after this one (dlsym
 * RTLD_NEXT): the system malloc under the drop-in. */
void *tcm__next_symbol(const char *name);
/* A symbol of a library the process has already loaded, by its file name,
 * even one loaded with RTLD_LOCAL; NULL when it is not loaded (nothing is
 * loaded for it). */
void *tcm__loaded_symbol(const char *library, const char *name);
/* The calling thread's stack for the heap profile: the return addresses
 * of the frames whose canonical frame address is above `above` (the CFA of
 * the library's outermost frame, __builtin_dwarf_cfa(): its own frames are
 * left out), and none inside the shared object this code is in (libtcm.so,
 * the drop-in). Innermost first, at most max; the count. It allocates
 * nothing (the unwinder reads the loaded objects' unwind tables). */
unsigned tcm__backtrace(uint64_t *frames, unsigned max, uintptr_t above);
/* The process's code mappings as text, a line per executable segment of
 * each loaded object: "start limit file_offset load_bias build_id path",
 * numbers in hex, build_id "-" when it has none, path TCM_MAPS_PROGRAM
 * for the program's own executable; lines that do not fit are left out.
 * The length. */
#define TCM_MAPS_PROGRAM "*" /* (the executable tcmd read for the process's record) */
size_t tcm__code_maps(char *buf, size_t len);
/* Changes whenever an object is loaded or unloaded (dl_iterate_phdr's
 * counters): the maps text is sent again then. */
uint64_t tcm__code_maps_gen(void);
/* Whether path names a regular file (tcmctl opens only those of the paths
 * a process's mappings name). */
bool tcm__is_regular_file(const char *path);
size_t tcm__os_page_size(void);

void tcm__kill_self(void) __attribute__((noreturn)); /* SIGKILL: test crash points */
/* A helper thread that receives no signals (they stay the application's),
 * named for ps/top; 0 or -errno. */
int tcm__thread_start_quiet(pthread_t *t, void *(*fn)(void *), void *arg, const char *name);
/* A name for the thread in ps and /proc (none on Windows). */
void tcm__thread_name(pthread_t t, const char *name);

static inline void tcm__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif

}



/* Remove every shm object whose name starts with prefix (leftovers of a
 * daemon that did not shut down cleanly). Returns how many. */
int tcm__shm_unlink_prefix(const char *prefix);
/* Runtime directory and files. Owner, group and mode (permission bits and
 * the sticky bit, 07777) of the directory at path itself: a symbolic link
 * there is not followed (-ELOOP), anything else than a directory is
 * -ENOTDIR; -ENOSYS where directories do not guard sockets (Windows). */
int tcm__dir_stat(const char *path, tcm_uid_t *uid, tcm_gid_t *gid, unsigned *mode);
/* Open path to append log lines, never through a symbolic link there
 * (-ELOOP): a missing file is created owner-only; an existing one is used
 * only if it is a regular file of this process's user (-EPERM, *owner set,
 * for another user's) or, with devices_too, a device or FIFO such as
 * /dev/null (-EINVAL for any other kind). 0 and *f, or -errno. */
int tcm__log_file_open(const char *path, bool devices_too, FILE **f, tcm_uid_t *owner);
#endif
