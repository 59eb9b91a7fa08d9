/* main.c — tcmd: arguments and config file, then segments, the heap thread
 * and the control loop; clean shutdown on SIGTERM/SIGINT. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "frame.h"
#include "config.h"
#include "crash.h"
#include "heapthread.h"
#include "huge.h"
#include "holders.h"
#include "log.h"
#include "metrics.h"
#include "migrate.h"
#include "prim.h"
#include "quota.h"
#include "recovery.h"
#include "segments.h"
#include "server.h"
#include "util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: tcmd [options]\n"
               "  --socket PATH             control socket (default $TCM_SOCKET, else\n"
               "                            $XDG_RUNTIME_DIR/tcm/tcmd.sock, else /tmp/tcm-UID/tcmd.sock)\n"
               "  --name NAME               shared-memory name (default derived from the socket path)\n"
               "  --config FILE             key = value lines of the settings below (names with _);\n"
               "                            SIGHUP reloads it; the command line overrides it\n"
               "  --log FILE                log file (default: stderr in the foreground, SOCKET.log otherwise)\n"
               "  --metrics-port P          serve Prometheus metrics at http://ADDR:P/metrics\n"
               "  --metrics-addr A          address for --metrics-port (default 127.0.0.1)\n"
               "  --metrics-socket PATH     serve the same on a Unix socket; the operator's page there lists pids\n"
               "  --discard-heap            replace the heap a previous tcmd left under this name\n"
               "                            (by default it is adopted: same heap, same address)\n"
               "  --foreground              do not detach\n"
               "  --list-settings           the settings as name, runtime, default, value, help (tab-separated)\n"
               "  --help\n"
               "settings (also in --config files and tcmctl config get|set; runtime ones while tcmd runs):\n");
    tcm__config_usage(f);
}

/* Whether tcmd may keep its socket and log in dir (DESIGN.md, "Runtime
 * directory"): whoever can write there could have put a socket or a log
 * of theirs in tcmd's place. Its runtime directory (the built-in default)
 * must be tcmd's own user's and writable by it alone: anyone could have
 * made /tmp/tcm-UID first. Any other (an explicit --socket) must belong to
 * tcmd's user or root and, if others may write there, be sticky like /tmp:
 * then no one else can remove or rename what tcmd puts there. The
 * directory itself is examined, never a link there. */
static int check_dir(const char *dir, bool runtime, const char *what)
{
    tcm_uid_t uid, self = tcm__uid();
    tcm_gid_t gid;
    unsigned mode;
    int err = tcm__dir_stat(dir, &uid, &gid, &mode);
    if (err == -ENOSYS)
        return 0;
    if (err) {
        fprintf(stderr, "tcmd: %s %s: %s\n", what, dir,
                err == -ELOOP ? "is a symbolic link (give the directory itself)" : strerror(-err));
        return err;
    }
    bool owner_ok = uid == self || (!runtime && uid == 0);
    bool writers_ok = !(mode & 022) || (!runtime && (mode & 01000));
    if (owner_ok && writers_ok)
        return 0;
    if (runtime)
        fprintf(stderr, "tcmd: refusing %s %s (owner uid %u, mode %04o): it must be tcmd's own (uid %u) and "
                        "writable by no one else; remove it or give --socket\n",
                what, dir, (unsigned)uid, mode, (unsigned)self);
    else
        fprintf(stderr, "tcmd: refusing %s %s (owner uid %u, mode %04o): it must belong to tcmd's user (uid %u) "
                        "or root, and be writable by no one else unless sticky like /tmp\n",
                what, dir, (unsigned)uid, mode, (unsigned)self);
    return -EPERM;
}

/* mkdir -p of the socket's directory, owner-only (with --allow-group, the
 * group may pass through tcmd's own one), and the checks above. */
static int prepare_socket_dir(tcm_server_t *srv)
{
    char dir[sizeof srv->socket_path], runtime[sizeof srv->socket_path];
    snprintf(dir, sizeof dir, "%s", srv->socket_path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        slash[slash == dir] = 0; /* "/x.sock" is in "/" */
    int made = tcm__make_dirs(dir, 0700);
    if (made < 0) {
        fprintf(stderr, "tcmd: cannot create the directory of %s: %s\n", srv->socket_path, strerror(-made));
        return made;
    }
    bool is_runtime = strcmp(srv->socket_path, tcm__runtime_socket(runtime, sizeof runtime)) == 0;
    int err = check_dir(dir, is_runtime, is_runtime ? "the runtime directory" : "the socket's directory");
    if (!err && is_runtime) { /* and no one else can rename it away: /tmp is sticky */
        slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = 0;
            err = check_dir(dir, false, "the runtime directory's parent");
            *slash = '/';
        }
    }
    if (!err && (made == 1 || is_runtime) && srv->allow_group_set &&
        (err = tcm__path_share(dir, srv->allow_group, 0710)) != 0)
        fprintf(stderr, "tcmd: chown/chmod(%s, group %u) failed: %s\n", dir, (unsigned)srv->allow_group,
                strerror(-err));
    return err;
}

/* Open the log: never through a link, never another user's file; --log
 * may name a device such as /dev/null, the default SOCKET.log may not. */
static FILE *open_log(const char *path, bool given)
{
    FILE *f = NULL;
    tcm_uid_t owner;
    int err = tcm__log_file_open(path, given, &f, &owner);
    if (err == -ELOOP)
        fprintf(stderr, "tcmd: refusing the log %s: it is a symbolic link (give the file itself)\n", path);
    else if (err == -EPERM)
        fprintf(stderr, "tcmd: refusing the log %s: it is a file of uid %u, not of tcmd's user (uid %u)\n", path,
                (unsigned)owner, (unsigned)tcm__uid());
    else if (err == -EINVAL)
        fprintf(stderr, "tcmd: refusing the log %s: not a regular file\n", path);
    else if (err)
        fprintf(stderr, "tcmd: cannot open log %s: %s\n", path, strerror(-err));
    return err ? NULL : f;
}

static uint32_t fnv1a(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static tcm_server_t srv_storage;

static void on_sighup(uv_signal_t *sig, int signum)
{
    tcm_server_t *srv = sig->data;
    (void)signum;
    if (!srv->config_path[0]) {
        tcm__log(TCM_LOG_INFO, "SIGHUP: no --config file to reload");
        return;
    }
    tcm__log(TCM_LOG_INFO, "SIGHUP: reloading %s", srv->config_path);
    tcm__config_load(srv, srv->config_path, true);
}

static void on_signal(uv_signal_t *sig, int signum)
{
    tcm__log(TCM_LOG_INFO, "%s received: shutting down", signum == SIGINT ? "SIGINT" : "SIGTERM");
    uv_stop(sig->loop);
}

static uint32_t count_clients(tcm_server_t *srv, uint32_t state)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < srv->max_clients; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        n += c && atomic_load(&c->rec->state) == state;
    }
    return n;
}

/* Stopping: with clients attached the heap is left for the next tcmd;
 * clients that just died are reclaimed first, so that a heap nobody uses
 * any more is removed as before. */
static void decide_what_stays(tcm_server_t *srv)
{
    for (int i = 0; i < 200 && count_clients(srv, TCM_REC_DEAD); i++)
        tcm__sleep_ns(10000000);
    uint32_t attached = count_clients(srv, TCM_REC_ACTIVE) + count_clients(srv, TCM_REC_EVICTED) +
                        count_clients(srv, TCM_REC_DEAD);
    if (attached) {
        srv->keep_segments = true;
        tcm__log(TCM_LOG_WARN, "%u clients are attached: leaving heap '%s' and socket %s for the next tcmd "
                 "(clients wait for it; start tcmd with --discard-heap to replace the heap)",
                 attached, srv->name, srv->socket_path);
    }
}

/* SOCKET.heap: how to start a tcmd that adopts this heap, for as long as
 * the heap outlives this tcmd (stopped with clients attached, or killed):
 * tcmctl prints it when nobody answers on the socket. */
static void hint_path(const tcm_server_t *srv, char *out, size_t len)
{
    snprintf(out, len, "%s.heap", srv->socket_path);
}

static void write_restart_hint(const tcm_server_t *srv)
{
    char path[160];
    hint_path(srv, path, sizeof path);
    /* as the log is opened: never through a link another user planted in a
     * shared (sticky) directory, never into someone else's file */
    remove(path);
    FILE *f = NULL;
    tcm_uid_t owner;
    if (tcm__log_file_open(path, false, &f, &owner) != 0)
        return;
    fprintf(f, "tcmd --socket %s --name %s --heap-size %llu --base 0x%llx --max-threads %u%s%s\n", srv->socket_path,
            srv->name, (unsigned long long)srv->heap_size, (unsigned long long)srv->base, srv->max_threads,
            srv->config_path[0] ? " --config " : "", srv->config_path);
    fclose(f);
}

static int run(tcm_server_t *srv, tcm_handle_t ready_fd)
{
    int rc = 1;
    tcm__stop_signals_hold(true); /* until the loop's handlers are in place; its threads never take them */
    srv->loop = uv_default_loop();
    srv->start_ns = tcm__now_ns();
    tcm__crash_init();
    if (tcm__fault_zones_init() != 0)
        tcm__log(TCM_LOG_WARN, "sigaction(SIGBUS) failed: a client that shrinks its channel can stop tcmd");
    if (tcm__segments_open(srv) != 0)
        goto out;
    if (tcm__state_upgrade(srv) != 0)
        goto out_segments;
    tcm__holders_init(srv, !srv->adopted);
    /* the doorbell page is the one page of the heap tcmd itself reads: a
     * client that truncates the heap segment destroys every object in it
     * (for every process), but not tcmd */
    tcm__fault_zone_add(srv->heap, TCM_PAGE_SIZE, &srv->heap_truncated);
    if (srv->adopted)
        tcm__config_adopt(srv);
    if (!srv->heap_limit || srv->heap_limit > srv->heap_size)
        srv->heap_limit = srv->heap_size;
    atomic_store(&srv->meta->config.heap_limit, srv->heap_limit & ~(uint64_t)(TCM_PAGE_SIZE - 1));
    tcm__config_publish(srv);
    if (srv->adopted && tcm__recover(srv) != 0)
        goto out_segments;
    if (tcm__quota_start(srv) != 0) {
        tcm__log(TCM_LOG_ERROR, "out of memory for the quota accounts");
        goto out_segments;
    }
    if (tcm__huge_start(srv) != 0)
        goto out_segments;
    if (tcm__heap_thread_start(srv) != 0) {
        tcm__huge_stop(srv);
        goto out_segments;
    }
    /* the handlers before the socket listens: a stop sent by whoever saw it
     * listen is handled, not held pending (under TSan one such SIGTERM,
     * held across the unblock, was never handled: integration.runtime) */
    uv_signal_init(srv->loop, &srv->sigterm);
    uv_signal_start(&srv->sigterm, on_signal, SIGTERM);
    uv_signal_init(srv->loop, &srv->sigint);
    uv_signal_start(&srv->sigint, on_signal, SIGINT);
    uv_signal_init(srv->loop, &srv->sighup);
    srv->sighup.data = srv;
    uv_signal_start(&srv->sighup, on_sighup, SIGHUP);
    tcm__stop_signals_hold(false);
    if (tcm__control_start(srv) != 0)
        goto out_thread;
    if ((srv->metrics_port || srv->metrics_socket[0]) && tcm__metrics_socket_start(srv) != 0)
        goto out_thread;
    if (srv->metrics_port && tcm__metrics_start(srv) != 0)
        goto out_thread;
    tcm__ignore_sigpipe();
    tcm__log(TCM_LOG_INFO, "tcmd %s ready: socket %s, heap %s %llu bytes at 0x%llx%s", TCM_VERSION_STRING,
             srv->socket_path, srv->heap_name, (unsigned long long)srv->heap_size, (unsigned long long)srv->base,
             srv->adopted ? " (adopted)" : "");
    if (ready_fd >= 0) {
        tcm__detach_ready(ready_fd);
        ready_fd = -1;
    }
    write_restart_hint(srv);
    uv_run(srv->loop, UV_RUN_DEFAULT);
    decide_what_stays(srv);
    rc = 0;
out_thread:
    tcm__heap_thread_stop(srv);
    tcm__huge_stop(srv); /* after the heap thread, which hands it ranges */
    /* the loop's handles first: a client embeds the poll of its process */
    tcm__control_close(srv);
    for (uint32_t i = 0; i < srv->max_clients; i++) {
        tcm_client_t *c = atomic_load(&srv->clients[i]);
        if (!c)
            continue;
        c->conn = NULL;
        atomic_store(&srv->clients[i], NULL);
        if (srv->keep_segments)
            tcm__client_unmap(srv, c);
        else
            tcm__client_destroy(srv, c);
    }
out_segments:
    if (rc != 0) /* a failed start deletes nothing it did not make: an adopted heap stays */
        srv->keep_segments = srv->keep_segments || srv->adopted;
    if (!srv->keep_segments) {
        char path[160];
        hint_path(srv, path, sizeof path);
        remove(path);
    }
    tcm__segments_close(srv);
    tcm__quota_free(srv);
out:
    if (ready_fd >= 0)
        tcm__close(ready_fd);
    uv_loop_close(srv->loop);
    return rc;
}

enum { O_SOCKET = 256, O_NAME, O_CONFIG, O_LOG, O_FG, O_MPORT, O_MADDR, O_MSOCK, O_DISCARD, O_LIST, O_SETTING = 512 };
#define TCMD_MAX_OPTIONS 64

/* tcmd's options: the fixed ones, then one per setting (--heap-size for
 * heap_size). False when there are more settings than room. */
static bool options_build(struct option opts[TCMD_MAX_OPTIONS])
{
    static const struct option fixed[] = {
        {"socket", required_argument, 0, O_SOCKET},   {"name", required_argument, 0, O_NAME},
        {"config", required_argument, 0, O_CONFIG},   {"log", required_argument, 0, O_LOG},
        {"foreground", no_argument, 0, O_FG},         {"help", no_argument, 0, 'h'},
        {"metrics-port", required_argument, 0, O_MPORT}, {"metrics-addr", required_argument, 0, O_MADDR},
        {"metrics-socket", required_argument, 0, O_MSOCK},
        {"discard-heap", no_argument, 0, O_DISCARD},  {"list-settings", no_argument, 0, O_LIST},
    };
    static char option_names[48][64];
    size_t nopts = sizeof fixed / sizeof fixed[0];
    memcpy(opts, fixed, sizeof fixed);
    for (size_t i = 0; tcm__config_setting(i); i++, nopts++) {
        if (i == sizeof option_names / sizeof option_names[0] || nopts + 1 == TCMD_MAX_OPTIONS) {
            fprintf(stderr, "tcmd: more settings than options (%zu): grow option_names and opts\n", i);
            return false;
        }
        snprintf(option_names[i], sizeof option_names[i], "%s", tcm__config_setting(i)->name);
        for (char *p = option_names[i]; *p; p++)
            *p = *p == '_' ? '-' : *p;
        opts[nopts] = (struct option){option_names[i], required_argument, 0, O_SETTING + (int)i};
    }
    opts[nopts] = (struct option){0};
    return true;
}

/* The config file first, so command-line options override it; false when
 * it cannot be read. */
static bool config_load_first(tcm_server_t *srv, int argc, char **argv)
{
    const char *config = NULL;
    for (int i = 1; i < argc - 1; i++)
        if (strcmp(argv[i], "--config") == 0)
            config = argv[i + 1];
    if (!config)
        return true;
    int bad = tcm__absolute_path(config, srv->config_path, sizeof srv->config_path);
    if (bad) {
        fprintf(stderr, "tcmd: cannot open config %s: %s\n", config, strerror(-bad));
        return false;
    }
    return tcm__config_load(srv, srv->config_path, false) == 0;
}

/* One option of the command line: -1 to go on, else main's exit status. */
static int option_apply(tcm_server_t *srv, int opt, const char *arg)
{
    char err[256];
    const char *key = NULL;
    switch (opt) {
    case O_SOCKET:
        if (strlen(arg) >= sizeof srv->socket_path) {
            fprintf(stderr, "tcmd: socket path too long\n");
            return 2;
        }
        snprintf(srv->socket_path, sizeof srv->socket_path, "%s", arg);
        break;
    case O_NAME:
        if (!*arg || strlen(arg) >= 48 || strchr(arg, '/')) {
            fprintf(stderr, "tcmd: --name must be 1-47 characters without '/'\n");
            return 2;
        }
        snprintf(srv->name, sizeof srv->name, "%s", arg);
        break;
    case O_CONFIG: break;
    case O_LOG: snprintf(srv->log_path, sizeof srv->log_path, "%.255s", arg); break;
    case O_FG: srv->foreground = true; break;
    case O_DISCARD: srv->discard_heap = true; break;
    case O_MPORT: {
        char *end;
        long port = strtol(arg, &end, 10);
        if (*end || port < 1 || port > 65535) {
            fprintf(stderr, "tcmd: --metrics-port needs a port number 1-65535\n");
            return 2;
        }
        srv->metrics_port = (int)port;
        break;
    }
    case O_MADDR: snprintf(srv->metrics_addr, sizeof srv->metrics_addr, "%.63s", arg); break;
    case O_MSOCK:
        if (strlen(arg) >= sizeof srv->metrics_socket) {
            fprintf(stderr, "tcmd: --metrics-socket: path longer than %zu bytes\n", sizeof srv->metrics_socket - 1);
            return 2;
        }
        snprintf(srv->metrics_socket, sizeof srv->metrics_socket, "%s", arg);
        break;
    case 'h': usage(stdout); return 0;
    case O_LIST: tcm__config_list(stdout); return 0;
    default:
        if (opt < O_SETTING || !tcm__config_setting((size_t)(opt - O_SETTING))) {
            usage(stderr);
            return 2;
        }
        key = tcm__config_setting((size_t)(opt - O_SETTING))->name;
    }
    if (key && tcm__config_set(srv, key, arg, false, err, sizeof err, NULL, NULL) != 0) {
        fprintf(stderr, "tcmd: %s\n", err);
        return 2;
    }
    return -1;
}

/* The command line over the config file, checked, and the defaults that
 * depend on it: -1 to go on, else main's exit status. */
static int options_parse(tcm_server_t *srv, int argc, char **argv)
{
    struct option opts[TCMD_MAX_OPTIONS];
    if (!options_build(opts) || !config_load_first(srv, argc, argv))
        return 2;
    int opt;
    while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int status = option_apply(srv, opt, optarg);
        if (status >= 0)
            return status;
    }
    if (optind < argc) {
        fprintf(stderr, "tcmd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    char err[256];
    if (tcm__config_check(srv, err, sizeof err) != 0) {
        fprintf(stderr, "tcmd: %s\n", err);
        return 2;
    }
    if (!srv->socket_path[0])
        tcm__default_socket(srv->socket_path, sizeof srv->socket_path);
    if (!srv->name[0])
        snprintf(srv->name, sizeof srv->name, "u%u-%08x", tcm__login_uid(), fnv1a(srv->socket_path));
    return -1;
}

/* A start that failed in the background child: its reasons, the error
 * lines it logged past offset from (read back from the file: the child
 * wrote them before it gave up), on the terminal too. */
static void tell_why(long from, const char *path)
{
    char line[1024];
    int told = 0;
    FILE *f = from >= 0 ? fopen(path, "r") : NULL;
    if (f && fseek(f, from, SEEK_SET) == 0)
        while (fgets(line, sizeof line, f))
            if (strstr(line, " error: ") && told++ < 8)
                fprintf(stderr, "tcmd: %s", strstr(line, " error: ") + 8);
    if (f)
        fclose(f);
    fprintf(stderr, "tcmd: failed to start%s; the log: %s\n", told ? "" : " (no reason logged)", path);
}

/* Refuse a second daemon on the socket, open the log, then run here
 * (--foreground) or in a detached child. */
static int start(tcm_server_t *srv)
{
    if (prepare_socket_dir(srv) != 0)
        return 1;
    tcm_handle_t fd = tcm__connect(srv->socket_path);
    if (fd >= 0) {
        tcm__close(fd);
        fprintf(stderr, "tcmd: a daemon is already running on %s\n", srv->socket_path);
        return 1;
    }
    /* a stale socket of a dead daemon stays until the new one replaces it */

    FILE *log = stderr;
    bool log_given = srv->log_path[0] != 0;
    if (!srv->foreground && !log_given)
        snprintf(srv->log_path, sizeof srv->log_path, "%.200s.log", srv->socket_path);
    if (srv->log_path[0] && !(log = open_log(srv->log_path, log_given)))
        return 1;
    tcm__log_open(log, tcm__log_level());

    if (srv->foreground)
        return run(srv, -1);

    /* Detach, but report failure to start: the parent exits only once the
     * child listens (status 0) or has given up (status 1). */
    tcm_handle_t ready;
    fflush(log);
    long log_from = log != stderr ? ftell(log) : -1;
    tcm_pid_t pid = tcm__detach(fileno(log), &ready);
    if (pid == 0)
        return run(srv, ready);
    if (pid > 0) {
        printf("tcmd: started (pid %d), socket %s\n", (int)pid, srv->socket_path);
        return 0;
    }
    if (pid == -ECHILD)
        tell_why(log_from, srv->log_path);
    else if (pid == -ENOSYS) /* Windows: a service manager, not a fork, puts daemons in the background */
        fprintf(stderr, "tcmd: cannot go to the background here: run it with --foreground\n");
    else
        fprintf(stderr, "tcmd: cannot go to the background: %s\n", strerror((int)-pid));
    return 1;
}

int main(int argc, char **argv)
{
    tcm_server_t *srv = &srv_storage;
    tcm__config_defaults(srv);
    snprintf(srv->metrics_addr, sizeof srv->metrics_addr, "127.0.0.1");
    srv->lock_fd = srv->heap_fd = srv->meta_fd = srv->state_fd = -1;
    int status = options_parse(srv, argc, argv);
    return status >= 0 ? status : start(srv);
}
