/* quota.h — memory quotas: what each user, or each (user, process name)
 * pair, may hold of the heap (quota.c; docs/DESIGN.md, "Memory quotas"). */
#ifndef TCM_QUOTA_H
#define TCM_QUOTA_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "tcm_layout.h"

#define TCM_QUOTA_TAGS (1u << 16) /* = TCM_TAGS (server.h) */

/* What one user holds: the bytes under every tag charged to it. */
typedef struct tcm_quota_acct {
    uint32_t uid;
    uint32_t tags;            /* tags charged to it; 0: the entry is empty */
    _Atomic uint64_t held;
    _Atomic uint64_t refused; /* requests refused for its quota */
    uint64_t asked_ns;        /* when its refusal last asked the processes to flush */
    uint64_t back;            /* bytes that came back to it since */
    uint32_t asked;           /* how many were asked then */
    uint32_t rule;            /* its own rule (index + 1), 0: uid_quota applies */
} tcm_quota_acct_t;

/* The heap thread's copy of a rule (the state segment's may change under
 * it). */
typedef struct tcm_quota_limit {
    uint64_t limit; /* 0: none */
    uint32_t uid;
    char name[16];
} tcm_quota_limit_t;

typedef struct tcm_quota {
    uint32_t seq; /* the state segment's quota_seq the copy was taken at */
    tcm_quota_limit_t rules[TCM_QUOTA_RULES];
    _Atomic uint64_t rule_held[TCM_QUOTA_RULES], rule_refused[TCM_QUOTA_RULES];
    /* users' entries come and go under lock (the heap thread; views copy
     * them under it); their counters are atomics */
    pthread_mutex_t lock;
    uint32_t mask;
    tcm_quota_acct_t *accts;
    uint32_t tag_uid[TCM_QUOTA_TAGS];
    uint8_t tag_rule[TCM_QUOTA_TAGS];                /* the (user, name) rule it counts for, + 1 */
    uint64_t tag_charged[TCM_QUOTA_TAGS / 64];       /* tag_uid is valid */
} tcm_quota_t;

typedef struct tcm_server tcm_server_t;
typedef struct tcm_client tcm_client_t;

/* Main thread, before the heap thread starts: allocate, take the rules
 * (repairing a write a crash cut short) and charge every tag in use to its
 * user, from what recovery counted. 0 or -ENOMEM. */
int tcm__quota_start(tcm_server_t *srv);
void tcm__quota_free(tcm_server_t *srv);

/* Heap thread. */
void tcm__quota_sync_ht(tcm_server_t *srv); /* the rules moved: take them again */
/* Bytes client c may still be handed (UINT64_MAX: no quota applies). */
uint64_t tcm__quota_room_ht(tcm_server_t *srv, tcm_client_t *c);
void tcm__quota_charge_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t bytes);
/* Bytes under tag (a merged tag's group's: the caller resolves it) came
 * back. */
void tcm__quota_credit_ht(tcm_server_t *srv, uint16_t tag, uint64_t bytes);
/* The tag owns nothing more. */
void tcm__quota_drop_tag_ht(tcm_server_t *srv, uint16_t tag);
/* A new group tag of uid's departed processes (not the first group's:
 * every other executable's, nobody's share). */
void tcm__quota_group_ht(tcm_server_t *srv, uint16_t tag, uint32_t uid);
/* Departed tag from merged into group tag to with its bytes. */
void tcm__quota_merge_ht(tcm_server_t *srv, uint16_t from, uint16_t to, uint64_t bytes);
/* c's request was refused for its quota: counted, logged, and the
 * processes asked to give back what they cache if that may help; returns
 * how many were asked (the client waits for them while not 0). */
uint64_t tcm__quota_refuse_ht(tcm_server_t *srv, tcm_client_t *c, uint64_t wanted);

/* Validator (heap thread): the users' and rules' bytes against the census
 * (held[tag]: what each tag owns). */
bool tcm__quota_validate(tcm_server_t *srv, const uint64_t *held, char *why, size_t whylen);

/* Main thread: set (limit > 0) or remove (0) the quota of uid, or of uid's
 * processes named name ("" for all of them). 0, -ENOENT (remove: none),
 * -ENOSPC (TCM_QUOTA_RULES set), -EINVAL (a name too long). */
int tcm__quota_set(tcm_server_t *srv, uint32_t uid, const char *name, uint64_t limit);

/* A row of tcmctl quota (any thread but the heap thread). */
typedef struct tcm_quota_row {
    uint32_t uid;
    char name[16];
    uint64_t limit;   /* 0: none */
    bool rule;        /* set by tcmctl quota, not the uid_quota default */
    uint64_t held, refused;
} tcm_quota_row_t;
/* Every rule, then users holding anything that no rule names: at most max
 * rows; returns how many. */
size_t tcm__quota_rows(tcm_server_t *srv, tcm_quota_row_t *rows, size_t max);

#endif
