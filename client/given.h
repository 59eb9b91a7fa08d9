/* given.h — checking and mapping what tcmd hands out (given.c). */
#ifndef TCM_CLIENT_GIVEN_H
#define TCM_CLIENT_GIVEN_H

#include <stdint.h>

#include "client.h"

/* What tcmd hands out is checked before it is used (slow paths only):
 * each of the n offsets of a REFILL answer for class cls is inside the
 * heap, past page 0, 16-byte aligned and on a page the page map gives to
 * cls; a page run's offset is the first page of a run of at least npages.
 * Anything else is fatal, naming the offset. */
TCM_HIDDEN void tcm__check_given(unsigned cls, const uint64_t *offs, uint32_t n);
TCM_HIDDEN void tcm__check_given_run(uint64_t off, uint64_t npages);
/* Map into this process, in one call per span, the pages of what tcmd
 * just handed out (checked): the spans of n objects, or a page run. The
 * pages are committed already (tcmd commits a span whole before it hands
 * out any of it, and it stays so while an object of it is out), so this
 * maps them and commits nothing: it saves a fault per page (a few
 * microseconds each, far more in a VM) for the price of a walk of the page
 * table. A private heap (the drop-in's) maps nothing ahead: its pages are
 * the process's anonymous memory, which a call backs no faster than the
 * faults do, and what it backs the program may never touch (a batch's
 * last objects, the middle of a large block; docs/BENCHMARKS.md, "Real
 * programs under the drop-in"). */
TCM_HIDDEN void tcm__map_given(const uint64_t *offs, uint32_t n);
TCM_HIDDEN void tcm__map_given_run(uint64_t off, uint64_t npages);
/* A page-map byte that is neither free, a size class nor the page-run
 * marker (tcmd writes no other): fatal, naming the pointer and the byte,
 * before it indexes the class table. */
TCM_HIDDEN void tcm__fatal_page_class(const char *caller, const void *p, unsigned cls) __attribute__((noreturn));

#endif
