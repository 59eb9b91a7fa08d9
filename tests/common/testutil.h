/* testutil.h — a private tcmd per test (its own socket and shm name, so
 * runs never collide), stats from it, and child processes with timeouts. */
#ifndef TCM_TESTUTIL_H
#define TCM_TESTUTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct tcm_test_daemon {
    pid_t pid;
    char socket[108];
    char name[48];
    char log[128];
} tcm_test_daemon_t;

/* Start tcmd --foreground with extra arguments (NULL-terminated list). */
void tt_daemon_start(tcm_test_daemon_t *d, const char *const *extra_args);
void tt_daemon_start_env(tcm_test_daemon_t *d, const char *const *extra_args, const char *const *env);
/* An environment entry that is not passed on: tcmd runs under a seccomp
 * filter that refuses pidfd_open with EPERM (as old kernels, sandboxes
 * and valgrind do), so its liveness watch is the /proc fallback. */
#define TT_NO_PIDFD "tt:no-pidfd"
/* Start another tcmd on d's socket and name (after the last one is gone),
 * with extra arguments and environment entries ("KEY=VALUE", NULL-ended). */
void tt_daemon_restart(tcm_test_daemon_t *d, const char *const *extra_args, const char *const *env);
/* Start tcmd on d's socket and name and wait for it to exit (a start that
 * must fail); returns its exit status and leaves its log in out. */
int tt_daemon_run_fail(tcm_test_daemon_t *d, const char *const *extra_args, char *out, size_t outlen);
/* The same with environment entries (a crash point armed, say). */
int tt_daemon_run_fail_env(tcm_test_daemon_t *d, const char *const *extra_args, const char *const *env, char *out,
                           size_t outlen);
/* Make d's stopped heap what the previous release (state layout 14) left:
 * its state version and the history fields it did not have. */
void tt_state_as_previous(const tcm_test_daemon_t *d);
/* Start a tcmd on d, leave a root of size bytes of byte in its heap, kill
 * it and make the heap the previous release's (tt_state_as_previous):
 * returns the root's object. */
void *tt_previous_heap(tcm_test_daemon_t *d, const char *root, size_t size, int byte);
/* Attached to d: the root is p, size bytes of byte; then freed and unset. */
void tt_take_root(const char *root, const void *p, size_t size, int byte);
/* Read the state header of d's heap (stopped or running) into *st. */
struct tcm_state_hdr;
void tt_state_read(const tcm_test_daemon_t *d, struct tcm_state_hdr *st);
/* SIGKILL, and wait until it is gone. */
void tt_daemon_kill(tcm_test_daemon_t *d);
/* Wait for a tcmd that dies by itself (a crash point); returns its status. */
int tt_daemon_wait_exit(tcm_test_daemon_t *d, int timeout_ms);
/* Does shm object /tcm.NAME.SUFFIX exist? */
bool tt_segment_exists(const tcm_test_daemon_t *d, const char *suffix);
/* Whether tcmd's log has the text (it says so on stderr, with the log, if not). */
bool tt_log_contains(const tcm_test_daemon_t *d, const char *what);
/* Run a shell command; its stdout in out; returns the exit status. */
int tt_run(const char *cmd, char *out, size_t outlen);
/* Run tcmctl --socket d->socket ARGS; output in out; returns the exit status. */
int tt_tcmctl(const tcm_test_daemon_t *d, const char *args, char *out, size_t outlen);
/* tcmctl check: the whole-heap validator must find nothing; otherwise print
 * its message and the end of tcmd's log, and abort. */
void tt_check_heap(const tcm_test_daemon_t *d);
/* Once every client has left by itself: none attached (waits up to 5 s),
 * nothing held by clients or orphaned, nothing refused, none died. */
void tt_check_all_back(const tcm_test_daemon_t *d);
/* SIGTERM, wait, and check it exited 0 and removed its segments. */
void tt_daemon_stop(tcm_test_daemon_t *d);
bool tt_daemon_alive(const tcm_test_daemon_t *d);

/* One request on a fresh connection; the response (never NULL). */
struct Tcm__Request;
struct Tcm__Response;
struct Tcm__Response *tt_request(const tcm_test_daemon_t *d, struct Tcm__Request *req);

/* One heap statistic by name (see TCM_HEAP_STATS). */
uint64_t tt_stat(const tcm_test_daemon_t *d, const char *name);
/* Number of attached clients and, for one pid, its bytes held/cached. */
int tt_clients(const tcm_test_daemon_t *d, pid_t pid, uint64_t *held, uint64_t *cached, uint32_t *threads);
/* Poll until stat == want or timeout; returns the last value. */
uint64_t tt_wait_stat(const tcm_test_daemon_t *d, const char *name, uint64_t want, int timeout_ms);

/* fork; run fn(arg) in the child and _exit with its return value. */
pid_t tt_fork(int (*fn)(void *), void *arg);
/* waitpid with a timeout (kills the child on timeout); returns the raw status. */
int tt_wait(pid_t pid, int timeout_ms);
/* Expect a normal exit with status 0. */
void tt_wait_ok(pid_t pid, int timeout_ms);
/* SIGTERM to tcmd (a child), again while it lives, and its raw status
 * within timeout_ms (killed and aborted past it, as tt_wait). */
int tt_terminate(pid_t pid, int timeout_ms);

/* Events read from /proc instead of a sleep, polled for at most timeout_ms;
 * each returns whether it happened. Every thread of process pid sleeps in
 * the kernel (waits: for tcmd, for a lock, for a child). */
bool tt_wait_threads_asleep(pid_t pid, int timeout_ms);
/* SIGSTOP to pid, then until every thread of it has stopped: the signal
 * takes effect after kill returns, and until then tcmd's heap thread may
 * still serve. On timeout pid is resumed and false returned. */
bool tt_stop(pid_t pid, int timeout_ms);

#include "cases.h"

/* Path of a test helper binary built next to the tests. */
const char *tt_path(const char *name, char *buf, size_t len);

#endif
