/* samples.h — the heap profile's samples and their processes, in the state
 * segment (docs/DESIGN.md, "Heap profiles"). The heap thread is their only
 * writer; the main thread reads them for a profile. */
#ifndef TCM_SAMPLES_H
#define TCM_SAMPLES_H

#include <stdbool.h>
#include <stdint.h>

#include "shares.h"
#include "tcm_layout.h"

struct tcm_heap;
struct tcm_server;
struct tcm_client;

/* The heap thread's view: where the parts are, and what is derived from
 * them (rebuilt by tcm__samples_recover_ht). */
typedef struct tcm_samples {
    tcm_profile_hdr_t *hdr;         /* in state: how much of each table was ever used */
    tcm_sample_t *samples;          /* in state */
    tcm_sample_proc_t *procs;       /* in state */
    uint64_t used[TCM_SAMPLES / 64];            /* live samples */
    uint32_t lowest;                            /* no free sample below */
    uint64_t samples_backed[TCM_SAMPLES * sizeof(tcm_sample_t) / 4096 / 64 + 1];
    uint64_t procs_backed[TCM_SAMPLE_PROCS * sizeof(tcm_sample_proc_t) / 4096 / 64 + 1];
    uint32_t refs[TCM_SAMPLE_PROCS];            /* live samples naming each process */
    tcm_shares_t by_uid;                        /* live samples per uid */
    tcm_shares_t procs_by_uid;                  /* process records per uid */
    uint32_t gen;                               /* the next live state (odd) */
    uint32_t ahead_procs, ahead_samples;        /* the high-water marks tcm__profile_ahead_ht last backed past
                                                   (UINT32_MAX: none yet) */
    /* W: heap thread, R: main (stats); since this tcmd started, but live */
    _Atomic uint64_t live, live_bytes, taken, refused;
} tcm_samples_t;

/* The samples' share of a user (a quarter of the table) and of records. */
#define TCM_SAMPLES_PER_UID (TCM_SAMPLES / 4)
#define TCM_SAMPLE_PROCS_PER_UID (TCM_SAMPLE_PROCS / 4)

/* Point s at the parts of a mapped state segment (heap.c). 0 or -ENOMEM. */
int tcm__samples_attach(tcm_samples_t *s, uint8_t *state_base, const tcm_state_layout_t *sl);
void tcm__samples_detach(tcm_samples_t *s);

/* TCM_OP_SAMPLE and TCM_OP_MAPS from client c (requests.c; profile.c): a status;
 * *recorded (SAMPLE): whether it was kept (a full table or a used share
 * refuse it quietly, counted). frames/text: tcmd's private copy. */
int tcm__sample_take_ht(struct tcm_server *srv, struct tcm_client *c, uint64_t run, uint64_t size,
                        uint64_t interval, const uint64_t *frames, uint32_t nframes, bool *recorded);
int tcm__sample_maps_ht(struct tcm_server *srv, struct tcm_client *c, uint64_t pos, uint64_t total,
                        const char *text, uint32_t len);

/* The page run of span index sp leaves the heap's hands (central.c, at the
 * only place a page run is freed): its sample, if any, goes. */
void tcm__sample_drop_ht(struct tcm_heap *h, uint32_t sp);

/* The heap thread, idle: the record the next new process takes and the
 * next new sample's entry are backed and mapped before a request needs
 * them (a process's first MAPS paid two fallocates and three page faults
 * for its record). At most one of each beyond the tables' high-water marks;
 * a kill leaves them backed and unused, which the next tcmd's backing of
 * them finds so. */
void tcm__profile_ahead_ht(struct tcm_server *srv);

/* Client c left: its process record, if any, becomes departed (freed when
 * no sample names it). */
void tcm__sample_client_gone_ht(struct tcm_server *srv, struct tcm_client *c);

/* Recovery, after the page heap's: keeps the live samples whose runs are
 * page runs, points their spans at them and nothing else at any; rebuilds
 * what is derived. Returns the repairs made. */
uint64_t tcm__samples_recover_ht(struct tcm_server *srv);

/* For profile.c: a process record freed, a free sample entry (UINT32_MAX:
 * none), a sample counted, the samples' and spans' part of the recovery
 * (its repairs). */
void tcm__sample_proc_free(tcm_samples_t *s, uint32_t i);
uint32_t tcm__sample_slot(tcm_samples_t *s);
void tcm__sample_count(tcm_samples_t *s, uint32_t i); /* live sample i, its fields written: used, counted */
uint64_t tcm__samples_recover_table_ht(struct tcm_heap *h);

/* One consistent copy of live sample i for a reader that is not the heap
 * thread; false if it is not live (or changed while read). */
bool tcm__sample_read(const tcm_samples_t *s, uint32_t i, tcm_sample_t *out);
/* The same of process record i (its current mappings text only). */
bool tcm__sample_proc_read(const tcm_samples_t *s, uint32_t i, tcm_sample_proc_t *out, char *maps, uint32_t *maps_len);

#endif
