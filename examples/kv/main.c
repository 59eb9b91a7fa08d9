/* main.c — tcm-kv: a pre-fork Redis-protocol cache whose workers share one
 * hash table in the tcm heap.
 *
 * The master attaches to tcmd, finds the table (root "tcm-kv") or creates
 * it, opens the listening socket and forks the workers; each worker
 * attaches as a client of its own and serves connections accepted from the
 * shared socket with its own libuv loop. The master restarts a worker that
 * dies (its caches are reclaimed by tcmd, a stripe it held locked is
 * repaired by the next worker to lock it) and stops them all on SIGTERM.
 * The table outlives the server: a tcm-kv started again on the same tcmd
 * serves the keys the last one left. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server.h"
#include "size.h"
#include <tcm.h>

#define ROOT "tcm-kv"

static void usage(FILE *f)
{
    fprintf(f, "usage: tcm-kv [--socket PATH] [--port N] [--bind ADDR] [--workers N] [--maxmemory SIZE]\n"
               "              [--output-limit SIZE] [--query-limit SIZE] [--maxclients N]\n"
               "  --socket PATH      tcmd's control socket (default: tcm's default, or $TCM_SOCKET)\n"
               "  --port N           TCP port (default 6390)\n"
               "  --bind ADDR        IPv4 address to listen on (default 127.0.0.1)\n"
               "  --workers N        worker processes (default: one per CPU, at most %d)\n"
               "  --maxmemory SIZE   evict least recently used keys past this many bytes of table\n"
               "                     (default: only when the heap is full)\n"
               "  --output-limit SIZE  close a client whose unsent replies pass this (default 64M)\n"
               "  --query-limit SIZE   close a client whose one command passes this (default 64M)\n"
               "  --maxclients N       refuse connections past this many (default 10000; each worker takes\n"
               "                       its share)\n",
            KV_MAX_WORKERS);
}

static int parse_options(int argc, char **argv, kv_options_t *o)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (kv_options_t){.bind = "127.0.0.1", .port = 6390, .workers = cpus > 0 ? (int)cpus : 1,
                        .output_limit = 64ull << 20, .query_limit = 64ull << 20, .maxclients = 10000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = v != NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
#ifdef KV_THREADS
        } else if (!strcmp(a, "--threads")) { /* tcm-kv-peers only: workers as threads of one process (threads.c) */
            o->threads = 1;
            continue;
#endif
        } else if (!strcmp(a, "--socket") && v) {
            o->socket = v;
        } else if (!strcmp(a, "--bind") && v) {
            o->bind = v;
        } else if (!strcmp(a, "--port") && v) {
            char *end;
            long p = strtol(v, &end, 10);
            ok = *end == 0 && p > 0 && p < 65536;
            o->port = (int)p;
        } else if (!strcmp(a, "--workers") && v) {
            char *end;
            long n = strtol(v, &end, 10);
            ok = *end == 0 && n >= 1 && n <= KV_MAX_WORKERS;
            o->workers = (int)n;
        } else if (!strcmp(a, "--maxmemory") && v) {
            ok = kv_parse_size(v, &o->maxmemory) == 0;
        } else if (!strcmp(a, "--output-limit") && v) {
            ok = kv_parse_size(v, &o->output_limit) == 0 && o->output_limit >= 4096;
        } else if (!strcmp(a, "--query-limit") && v) {
            ok = kv_parse_size(v, &o->query_limit) == 0 && o->query_limit >= 4096;
        } else if (!strcmp(a, "--maxclients") && v) {
            char *end;
            unsigned long long n = strtoull(v, &end, 10);
            ok = *end == 0 && *v != '-' && n >= 1 && n <= 1000000;
            o->maxclients = n;
        } else {
            fprintf(stderr, "tcm-kv: unknown option %s\n", a);
            usage(stderr);
            return -1;
        }
        if (!ok) {
            fprintf(stderr, "tcm-kv: bad value for %s: %s\n", a, v ? v : "(missing)");
            return -1;
        }
        i++;
    }
    if (o->workers > KV_MAX_WORKERS)
        o->workers = KV_MAX_WORKERS;
    return 0;
}

static int listen_on(const kv_options_t *o)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->bind, &sa.sin_addr) != 1) {
        fprintf(stderr, "tcm-kv: --bind %s is not an IPv4 address\n", o->bind);
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 511) != 0) {
        fprintf(stderr, "tcm-kv: cannot listen on %s:%d: %s\n", o->bind, o->port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* The shared root: found (a table a previous tcm-kv left), or created. */
static kv_shared_t *find_or_create(void)
{
    kv_shared_t *sh = tcm_root_get(ROOT);
    if (sh && sh->magic == KV_MAGIC && sh->table && sh->table->magic == KV_MAGIC &&
        sh->table->nstripes == KV_STRIPES) {
        fprintf(stderr, "tcm-kv: serving the table a previous tcm-kv left (%" PRIu64 " keys)\n",
                kv_table_keys(sh->table, NULL));
        for (int i = 0; i < KV_MAX_WORKERS; i++)
            atomic_store(&sh->workers[i].pid, 0);
        sh->started_ms = kv_now_ms();
        return sh;
    }
    if (sh)
        fprintf(stderr, "tcm-kv: root \"%s\" is not a tcm-kv table of this version: making a new one\n", ROOT);
    sh = tcm_malloc(sizeof *sh);
    if (!sh)
        return NULL;
    memset(sh, 0, sizeof *sh);
    if (!(sh->table = kv_table_create())) {
        tcm_free(sh);
        return NULL;
    }
    sh->started_ms = kv_now_ms();
    sh->magic = KV_MAGIC;
    if (tcm_root_set(ROOT, sh) != 0) {
        fprintf(stderr, "tcm-kv: cannot publish the table as root \"%s\"\n", ROOT);
        return NULL;
    }
    return sh;
}

static void raise_fd_limit(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
}

static volatile sig_atomic_t stopping;

static void on_stop(int sig)
{
    (void)sig;
    stopping = 1;
}

static void on_child(int sig)
{
    (void)sig;
}

static pid_t master;
/* The master waits for a stop or a child with those signals blocked but
 * while sigsuspend waits: a SIGTERM between its check of `stopping` and a
 * blocking waitpid was lost until a worker exited (integration.kv hung so
 * once, under TSan). A worker starts with the mask the master had. */
static sigset_t unblocked;

static pid_t start_worker(const kv_options_t *o, kv_shared_t *sh, int index, int fd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* a worker does not outlive its master */
    if (getppid() != master)
        _exit(0);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    sigprocmask(SIG_SETMASK, &unblocked, NULL);
    if (tcm_init(o->socket) != 0) /* a client of its own */
        _exit(3);
    int rc = kv_worker_run(o, sh, index, fd, NULL);
    tcm_shutdown();
    _exit(rc);
}

int main(int argc, char **argv)
{
    kv_options_t o;
    if (parse_options(argc, argv, &o) != 0)
        return 2;
    raise_fd_limit();
    signal(SIGPIPE, SIG_IGN);
    int err = tcm_init(o.socket);
    if (err) {
        fprintf(stderr, "tcm-kv: cannot attach to tcmd: %s\n", strerror(-err));
        return 1;
    }
    kv_shared_t *sh = find_or_create();
    if (!sh) {
        fprintf(stderr, "tcm-kv: no memory for the table in the tcm heap\n");
        return 1;
    }
    int fd = listen_on(&o);
    if (fd < 0)
        return 1;
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
#ifdef KV_THREADS
    if (o.threads) {
        fprintf(stderr, "tcm-kv: %d threads on %s:%d%s\n", o.workers, o.bind, o.port,
                o.maxmemory ? ", maxmemory set" : "");
        return kv_run_threads(&o, sh, fd, &stopping);
    }
#endif
    fprintf(stderr, "tcm-kv: %d workers on %s:%d%s\n", o.workers, o.bind, o.port, o.maxmemory ? ", maxmemory set" : "");
    /* the master stays attached (it keeps the table's header current) but
     * allocates nothing more; each worker attaches as a client of its own */
    sa.sa_handler = on_child;
    sigaction(SIGCHLD, &sa, NULL);
    sigset_t waited;
    sigemptyset(&waited);
    sigaddset(&waited, SIGTERM);
    sigaddset(&waited, SIGINT);
    sigaddset(&waited, SIGCHLD);
    sigprocmask(SIG_BLOCK, &waited, &unblocked);
    pid_t pids[KV_MAX_WORKERS];
    int64_t started[KV_MAX_WORKERS];
    master = getpid();
    for (int i = 0; i < o.workers; i++) {
        pids[i] = start_worker(&o, sh, i, fd);
        started[i] = kv_now_ms();
    }
    while (!stopping) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid == 0) {
            sigsuspend(&unblocked); /* a stop, or a child to reap */
            continue;
        }
        if (pid < 0) {
            if (errno == ECHILD)
                break;
            continue;
        }
        for (int i = 0; i < o.workers && !stopping; i++) {
            if (pids[i] != pid)
                continue;
            atomic_store(&sh->workers[i].pid, 0);
            if (WIFEXITED(st) && WEXITSTATUS(st) == 3) {
                fprintf(stderr, "tcm-kv: worker %d could not attach to tcmd; retrying in 1 s\n", i);
                sleep(1);
            } else if (kv_now_ms() - started[i] < 1000) {
                sleep(1); /* dying at once again and again: do not spin */
            }
            fprintf(stderr, "tcm-kv: worker %d (pid %d) %s %d; starting a new one\n", i, (int)pid,
                    WIFSIGNALED(st) ? "killed by signal" : "exited with", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            atomic_fetch_add(&sh->worker_restarts, 1);
            pids[i] = start_worker(&o, sh, i, fd);
            started[i] = kv_now_ms();
        }
    }
    for (int i = 0; i < o.workers; i++)
        kill(pids[i], SIGTERM);
    for (int i = 0; i < o.workers; i++)
        waitpid(pids[i], NULL, 0);
    fprintf(stderr, "tcm-kv: stopped\n");
    return 0;
}
