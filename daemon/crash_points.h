/* crash_points.h — every test crash point of tcmd, once: the daemon's sites
 * name them by symbol (TCM_CRASH_POINT(split), a typo does not compile),
 * tcmd maps TCM_TEST_CRASH_AT=name:N to one of them, and
 * tests/integration/test_crashpoints.c enumerates this list, so a point
 * added here without a test case fails that test. Each X(name, where)
 * gives the point and the step it falls between. */
#ifndef TCM_CRASH_POINTS_H
#define TCM_CRASH_POINTS_H

#define TCM_CRASH_POINT_LIST(X)                                                                    \
    X(picked, "request intent PICKED, nothing applied (requests.c)")                              \
    X(refill, "refill applied to the central lists, answer not written (requests.c)")             \
    X(refill_span, "one span's objects taken by a refill (central.c)")                            \
    X(return_half, "half a RETURN batch freed (central.c)")                                       \
    X(alloc_pages, "intent APPLYING, no page run cut yet (requests.c)")                           \
    X(free_pages, "intent APPLYING with the run named, not yet unmapped (requests.c)")            \
    X(root_set, "root intent APPLYING, before the root's write (roots.c)")                        \
    X(root_odd, "root sequence odd, nothing written (roots.c)")                                   \
    X(root_data, "root name, offset and holder written, sequence still odd (roots.c)")            \
    X(span_map, "page intent MAP recorded (central.c)")                                           \
    X(span_rec, "a small span mapped, its object record not yet cleared (central.c)")            \
    X(tag_block, "a shared word's tag block filled, not yet named by its owner word (central.c)") \
    X(span_unmap, "span unmapped under the page intent (central.c)")                              \
    X(split, "span shortened, remainder record filled (pageheap.c)")                              \
    X(coalesce, "neighbour merged and deleted (pageheap.c)")                                      \
    X(tail, "ring tail advanced, intent not cleared (requests.h)")                                \
    X(commit, "request intent cleared, ring cell not yet freed (requests.h)")                     \
    X(answered, "answer written to the client's slot (requests.c)")                               \
    X(release, "a free run punched, its record not yet marked released (pageheap.c)")             \
    X(sample_run, "a run of a stock of sample runs made and logged, the next not cut (requests.c)")  \
    X(pages_step, "a step of an ALLOC_PAGES run committed, the run in transit (continuation.c)")   \
    X(reclaim, "between batches of a dead client's cache (reclaim.c)")                            \
    X(reclaim_run, "an unread ALLOC_PAGES answer's run freed, not yet credited (reclaim.c)")      \
    X(client_create, "client record CREATING, channel not made (segments.c)")                     \
    X(migrate, "a state migration step's fields written, its version not yet (migrate.c)")

typedef enum {
#define TCM_CRASH_ENUM(name, where) TCM_CRASH_##name,
    TCM_CRASH_POINT_LIST(TCM_CRASH_ENUM)
#undef TCM_CRASH_ENUM
    TCM_CRASH_COUNT
} tcm_crash_point_t;

/* for TCM_CRASH_POINT_LIST: each point's name as a string, in enum order */
#define TCM_CRASH_NAME(name, where) #name,

#endif
