/* bench_util.h — what the tcm benchmarks share: timing, run statistics,
 * argument parsing, a check of which malloc the binary really got, and a
 * private tcmd started and stopped by the harness. Only the public tcm.h is
 * used, so the benchmarks measure what an application sees. */
#ifndef TCM_BENCH_UTIL_H
#define TCM_BENCH_UTIL_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BENCH_MAX_RUNS 64

/* An allocator under test. The system entry is whatever malloc this binary
 * was linked with (glibc, or jemalloc/tcmalloc/mimalloc replacing it). */
typedef struct {
    const char *name;
    void *(*alloc)(size_t);
    void (*release)(void *);
    void *(*zalloc)(size_t, size_t); /* calloc */
} bench_alloc_t;

/* The allocators of this binary: "tcm" and BENCH_SYSTEM_NAME. */
const bench_alloc_t *bench_allocs(size_t *n);
/* Parses "tcm,glibc" or "all" into indexes of bench_allocs(); exits on an
 * unknown name. Returns how many were chosen. */
size_t bench_pick_allocs(const char *list, size_t *idx, size_t max);

/* The one allocator named (exits on an unknown name, as above). */
const bench_alloc_t *bench_alloc_named(const char *name);

typedef struct bench_daemon bench_daemon_t;
/* What every benchmark does first: the allocators of list into idx (at
 * most max), the check that the system malloc is the one claimed, and a
 * private tcmd started (binary tcmd, NULL: the one next to the benchmark)
 * when "tcm" is among them. Returns how many were chosen. */
size_t bench_setup(const char *list, size_t *idx, size_t max, bench_daemon_t *daemon, const char *tcmd);

/* Aborts unless malloc in this process comes from the library the binary
 * claims (a missing -l or link order mistake would silently bench glibc). */
void bench_check_system_malloc(void);

double bench_now(void); /* CLOCK_MONOTONIC, seconds */

/* The seed's workload: PAIRS pairs as batches of BATCH allocations of SIZE
 * bytes (first byte written, addresses summed into *sum) then their frees.
 * scratch holds BATCH pointers. -1 if the allocator returned NULL. */
int bench_batch_loop(const bench_alloc_t *a, size_t size, size_t batch, uint64_t pairs, void **scratch,
                     uintptr_t *sum);

/* SIGALRM (armed with alarm(seconds) around each timed run) ends the
 * process with status 3 and a message naming what timed out: a hang must
 * fail the run, not stall the suite. tcmd and forked sides die with us
 * (PR_SET_PDEATHSIG). */
void bench_timeout_init(const char *what);

/* fork() for a benchmark's side or worker process (exits on failure). The
 * child dies with this process (PR_SET_PDEATHSIG; at once if it is already
 * gone) and does not inherit its alarm; the parent arms its own around the
 * timed part. */
pid_t bench_fork(void);

typedef struct {
    double median, min, max;
} bench_stats_t;
bench_stats_t bench_stats(const double *t, int n);

/* The options every harness takes: --runs R, --csv, --tcmd PATH,
 * --tcmd-arg ARG (bench_daemon_add_arg), --timeout SEC, --verbose and
 * --help ('h'). BENCH_COMMON_OPTIONS ends a harness's getopt_long table,
 * after its own options (codes from 256 on); bench_getopt handles
 * them. */
typedef struct bench_opts {
    int runs, csv, verbose;
    unsigned timeout_s;
    const char *tcmd; /* NULL: the tcmd next to the harness */
} bench_opts_t;
#define BENCH_OPTS_DEFAULT {.runs = 5, .timeout_s = 300}
enum { BENCH_O_RUNS = 0x1000, BENCH_O_CSV, BENCH_O_TCMD, BENCH_O_TCMD_ARG, BENCH_O_TIMEOUT, BENCH_O_VERBOSE };
#define BENCH_COMMON_OPTIONS                                                                                       \
    {"runs", required_argument, 0, BENCH_O_RUNS}, {"csv", no_argument, 0, BENCH_O_CSV},                            \
        {"tcmd", required_argument, 0, BENCH_O_TCMD}, {"tcmd-arg", required_argument, 0, BENCH_O_TCMD_ARG},       \
        {"timeout", required_argument, 0, BENCH_O_TIMEOUT}, {"verbose", no_argument, 0, BENCH_O_VERBOSE},          \
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}
/* getopt_long over opts (ended by BENCH_COMMON_OPTIONS): the common
 * options go into *o, the next of the harness's own is returned (its
 * argument in optarg); -1 at the end. */
int bench_getopt(int argc, char **argv, const struct option *opts, bench_opts_t *o);
/* Whether the runs asked for are within 1..BENCH_MAX_RUNS. */
bool bench_runs_ok(const bench_opts_t *o);

/* "64", "4K", "16KiB", "1M" -> bytes; exits with a message on garbage. */
uint64_t bench_parse_size(const char *opt, const char *s);

/* Private daemon: started from the tcmd given (NULL: ../tcmd next to this
 * binary) on /tmp/tcm-bench-PID.sock, waited for until the socket accepts,
 * exported as TCM_SOCKET and attached with tcm_init. Exits on failure.
 * Call it before creating threads; stop it at the end with SIGTERM. */
struct bench_daemon {
    pid_t pid;
    char socket[108];
    char name[32];
    const char *tcmd;
};
void bench_daemon_start(bench_daemon_t *d, const char *tcmd);
void bench_daemon_stop(bench_daemon_t *d);
/* SIGKILL tcmd (the heap stays); start another on the same socket and name
 * (it adopts the heap); returns the seconds until its socket accepted. */
void bench_daemon_kill(bench_daemon_t *d);
double bench_daemon_restart(bench_daemon_t *d);

/* Extra tcmd arguments (e.g. "--heap-size", "64G") for the next
 * bench_daemon_start; the strings must outlive it. At most 8. */
#define BENCH_DAEMON_MAX_ARGS 8
void bench_daemon_add_arg(const char *arg);
void bench_daemon_clear_args(void);

/* Runs `tcmctl --socket D --json COMMAND` (tcmctl next to the tcmd started)
 * and returns the integer value of "KEY" in its answer, or -1. */
int64_t bench_daemon_query(const bench_daemon_t *d, const char *command, const char *key);
/* Run `tcmctl COMMAND` (its human table) on the bench's tcmd, to stderr. */
void bench_daemon_print(const bench_daemon_t *d, const char *command);

#endif
