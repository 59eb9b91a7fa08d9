/* huge.h — the heap on 2 MiB pages (huge.c; docs/DESIGN.md, "Huge pages"). */
#ifndef TCM_HUGE_H
#define TCM_HUGE_H

#include <stdbool.h>
#include <stdint.h>

struct tcm_server;

/* The collapser: a thread of tcmd's that asks the kernel for large pages,
 * range by range, within huge_collapse_ms a second. 0 or -errno. */
int tcm__huge_start(struct tcm_server *srv);
void tcm__huge_stop(struct tcm_server *srv);
/* Heap thread, every turn: the collapser's answers, then (every
 * TCM_HUGE_SCAN_NS) a look at the next ranges for ones that stay in use. */
#define TCM_HUGE_SCAN_NS (50u * 1000u * 1000u)
void tcm__huge_tick_ht(struct tcm_server *srv, uint64_t now);
/* Whether the collapser has ranges in hand, or the last look found some:
 * the heap thread looks again in TCM_HUGE_SCAN_NS, asleep or not. */
bool tcm__huge_busy(const struct tcm_server *srv);

#endif
