/* tcm_compiler.h — the two attributes that keep a hot path small (STYLE.md,
 * "Hot path"): what a fast path does on a miss is a call, never code
 * inlined into it, so the hit stays a few instructions in a few cache lines.
 *
 *   TCM_NOINLINE  a slow path that runs in steady state (a refill, a bin's
 *                 overflow, the transfer tier, page runs): compiled for
 *                 speed like the rest, but never inlined into its callers.
 *   TCM_COLD      a path that runs rarely (attach, reconnect, a thread's
 *                 first and last call, scavenging, a flush, fork, fatal
 *                 errors): also never inlined, compiled for size, placed
 *                 apart from the hot text (.text.unlikely), and a branch
 *                 that calls it is predicted not taken.
 *
 * Mark the definition (a static function's too: within its file the
 * compiler would otherwise be free to inline it). */
#ifndef TCM_COMPILER_H
#define TCM_COMPILER_H

#define TCM_NOINLINE __attribute__((noinline))
#define TCM_COLD __attribute__((cold, noinline))

#endif
