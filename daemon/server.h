/* server.h — the daemon: one struct with every piece of state, in sections
 * by owner. The heap thread owns the heap; the main thread runs the libuv
 * loop (control socket, signals) and owns the client table's allocation. */
#ifndef TCM_SERVER_H
#define TCM_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "heap.h"
#include "tcm_layout.h"

#define TCM_VERSION_STRING "0.1.0"
#define TCM_MAX_CLIENTS 1024u
/* An owner tag is a client's table index plus a generation of that index,
 * so objects of a departed client are not credited to the next one there. */
#define TCM_TAG_INDEX_BITS 10u
#define TCM_TAG_GENS 63u /* generations 1..63; tag 0 is nobody */
#define TCM_DEFAULT_BASE 0x7e8000000000ull
#define TCM_DEFAULT_HEAP (1ull << 30)

enum tcm_client_state {
    TCM_CL_ACTIVE = 1, /* attached; the heap thread serves its ring */
    TCM_CL_DEAD = 2,   /* its socket closed: reclaim its caches */
    TCM_CL_EVICTED = 3, /* detached by an operator: frees only, until it exits */
};

typedef struct tcm_conn tcm_conn_t;

/* An attached client. Created by the main thread, served and finally reaped
 * by the heap thread, freed by the main thread. */
typedef struct tcm_client {
    _Atomic int state;        /* enum tcm_client_state */
    uint32_t index;           /* in server.clients */
    uint16_t tag;             /* owner tag of what it allocates */
    uint32_t id;
    pid_t pid;                /* from SO_PEERCRED */
    uid_t uid;
    uint64_t attached_unix;
    char chan_name[96];
    int chan_fd;
    uint8_t *chan;            /* the daemon's mapping of the channel */
    tcm_chan_layout_t lay;    /* private copy: the channel header is untrusted */
    tcm_ring_t *ring;
    tcm_slot_t *slots;
    uint64_t tail;            /* heap thread: ring consumer position */
    /* heap thread writes, main thread reads. bytes_back counts this
     * client's allocations that came back to the heap, whoever freed them */
    _Atomic uint64_t bytes_out, bytes_back, requests, errors;
    _Atomic bool said_bye;    /* detached on purpose, not killed */
    tcm_conn_t *conn;         /* main thread: its control connection */
    struct tcm_client *next_reaped;
} tcm_client_t;

enum tcm_mbox_cmd { TCM_MBOX_NONE = 0, TCM_MBOX_RELEASE = 1, TCM_MBOX_RESIZE = 2, TCM_MBOX_NOP = 3 };

#define TCM_OP_NAMES(X)                                                                       \
    X(NOP, "nop") X(REFILL, "refill") X(RETURN, "return") X(ALLOC_PAGES, "alloc_pages")        \
    X(FREE_PAGES, "free_pages") X(ROOT_SET, "root_set")
#define TCM_NOPS 6u
/* Request service time: bucket i counts requests under 250 ns << i; the
 * last bucket is everything slower. */
#define TCM_LAT_BUCKETS 16u
#define TCM_LAT_BASE_NS 250u

/* The daemon's own counters: heap thread writes, main thread reads. */
typedef struct tcm_daemon_stats {
    _Atomic uint64_t ops[TCM_NOPS];
    _Atomic uint64_t refused[TCM_ST__COUNT];
    _Atomic uint64_t latency[TCM_LAT_BUCKETS];
    _Atomic uint64_t latency_sum_ns;
} tcm_daemon_stats_t;

typedef struct tcm_server {
    /* settings, fixed after start */
    char socket_path[108];
    char name[64];
    char log_path[256];
    uint64_t heap_size;
    uint64_t base;
    uint32_t max_threads;
    bool foreground;
    char config_path[256];

    /* runtime settings (config.c); published to the metadata segment */
    uint64_t heap_limit;
    uint64_t tcache_budget;
    uint64_t xfer_budget;
    uint64_t page_cache_cap;

    /* segments */
    char heap_name[96], meta_name[96], lock_name[96];
    int heap_fd, meta_fd, lock_fd;
    uint8_t *heap;
    tcm_meta_hdr_t *meta;
    uint64_t meta_size;
    tcm_bell_t *bell;
    tcm_chan_layout_t chan_layout;

    /* heap thread */
    tcm_heap_t h;
    pthread_t heap_thread;
    bool heap_thread_started;
    _Atomic bool stop;
    _Atomic uint64_t spin_ns; /* how long the heap thread polls before sleeping */
    tcm_daemon_stats_t dstats;

    /* clients: slots written by the main thread (attach) and the heap thread
     * (reap), read by both */
    tcm_client_t *_Atomic clients[TCM_MAX_CLIENTS];
    _Atomic uint32_t clients_hw; /* indices below this may be in use */
    uint32_t next_client_id;
    uint8_t slot_gen[TCM_MAX_CLIENTS]; /* generation of each index's last tag */
    pthread_mutex_t reaped_lock;
    tcm_client_t *reaped;        /* reclaimed, waiting for the main thread */
    uv_async_t reaped_async;

    /* main thread -> heap thread commands */
    pthread_mutex_t mbox_lock;
    pthread_cond_t mbox_cond;
    _Atomic int mbox_cmd;
    uint64_t mbox_arg;
    uint64_t mbox_result;
    bool mbox_done;

    /* libuv */
    uv_loop_t *loop;
    uv_pipe_t listener;
    uv_signal_t sigterm, sigint, sighup;
    uv_tcp_t metrics;
    char metrics_addr[64];
    int metrics_port; /* 0: no /metrics endpoint */
    uint64_t start_ns;
} tcm_server_t;

/* segments.c */
int tcm__segments_create(tcm_server_t *srv);
void tcm__segments_destroy(tcm_server_t *srv);
int tcm__client_create(tcm_server_t *srv, pid_t pid, uid_t uid, tcm_client_t **out);
void tcm__client_destroy(tcm_server_t *srv, tcm_client_t *c);

/* requests.c: the heap thread */
int tcm__heap_thread_start(tcm_server_t *srv);
void tcm__heap_thread_stop(tcm_server_t *srv);
void tcm__heap_kick(tcm_server_t *srv);
uint64_t tcm__heap_command(tcm_server_t *srv, int cmd);
int tcm__heap_command_timed(tcm_server_t *srv, int cmd, int timeout_ms, uint64_t *result);

/* control.c: the libuv side */
int tcm__control_start(tcm_server_t *srv);
void tcm__control_close(tcm_server_t *srv);

#endif
