/* server.h — one tcm-kv worker: a libuv loop serving RESP2 on a listening
 * socket it shares with the other workers, on the shared table. */
#ifndef KV_SERVER_H
#define KV_SERVER_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "table.h"

#define KV_MAX_WORKERS 64

/* Per-worker figures in the shared header, so INFO in any worker sums
 * them; a restarted worker starts its entry again. */
typedef struct kv_worker_stats {
    _Atomic uint64_t pid, connected, connections, commands, rejected, hits, misses;
} __attribute__((aligned(64))) kv_worker_stats_t;

/* The root every worker finds: the table and the workers' figures. */
typedef struct kv_shared {
    uint64_t magic;
    kv_table_t *table;
    int64_t started_ms;
    _Atomic uint64_t worker_restarts;
    kv_worker_stats_t workers[KV_MAX_WORKERS];
} kv_shared_t;

typedef struct kv_options {
    const char *socket; /* tcm's */
    const char *bind;
    int port;
    int workers;
    uint64_t maxmemory;    /* 0: the heap's limit */
    uint64_t output_limit; /* a connection whose unsent replies pass this is closed */
    uint64_t query_limit;  /* a connection whose command (as buffered) passes this is closed */
    uint64_t maxclients;   /* connections of all workers; past it a new one is refused */
#ifdef KV_THREADS
    int threads; /* workers are threads of one process (tcm-kv-peers for bench/, threads.c) */
#endif
} kv_options_t;

/* Run one worker until SIGTERM (or stop_flag, threads); returns the exit code. */
int kv_worker_run(const kv_options_t *o, kv_shared_t *sh, int index, int listen_fd, _Atomic int *stop_flag);
#ifdef KV_THREADS
/* --threads: the workers as threads of this process until *stopping. */
int kv_run_threads(const kv_options_t *o, kv_shared_t *sh, int fd, volatile sig_atomic_t *stopping);
#endif

#endif
