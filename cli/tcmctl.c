/* tcmctl — the control CLI: ping, stats, clients. Human tables by default,
 * --json for scripts. Exit codes: 0 success, 1 the daemon answered with an
 * error, 2 usage, 3 cannot connect. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "util.h"

enum { EXIT_DAEMON = 1, EXIT_USAGE = 2, EXIT_CONNECT = 3 };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tcmctl [--socket PATH] [--json] COMMAND\n"
            "commands:\n"
            "  ping      check that tcmd answers\n"
            "  stats     heap totals\n"
            "  clients   attached processes: pid, bytes held, bytes cached\n"
            "  release   give every free page back to the OS now\n"
            "exit codes: 0 ok, 1 daemon error, 2 usage, 3 cannot connect\n");
}

static Tcm__Response *call(const char *path, Tcm__Request *req)
{
    int fd = tcm__connect(path);
    if (fd < 0) {
        fprintf(stderr, "tcmctl: cannot connect to tcmd on %s: %s\n", path, strerror(-fd));
        if (fd == -ENOENT || fd == -ECONNREFUSED)
            fprintf(stderr, "tcmctl: is tcmd running? start it with: tcmd --socket %s\n", path);
        exit(EXIT_CONNECT);
    }
    req->version = TCM_PROTO_VERSION;
    int err = tcm__frame_send(fd, req);
    Tcm__Response *resp = err ? NULL : tcm__frame_recv(fd, 10000);
    if (!resp) {
        fprintf(stderr, "tcmctl: no answer from tcmd on %s: %s\n", path, strerror(err ? -err : errno));
        exit(EXIT_CONNECT);
    }
    close(fd);
    if (resp->body_case == TCM__RESPONSE__BODY_ERROR) {
        fprintf(stderr, "tcmctl: tcmd: %s\n", resp->error->message);
        exit(EXIT_DAEMON);
    }
    return resp;
}

static int cmd_ping(const char *path, bool json)
{
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__Ping ping = TCM__PING__INIT;
    struct timespec t0, t1;
    ping.nonce = (uint64_t)getpid();
    req.body_case = TCM__REQUEST__BODY_PING;
    req.ping = &ping;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Tcm__Response *resp = call(path, &req);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (resp->body_case != TCM__RESPONSE__BODY_PONG || resp->pong->nonce != ping.nonce) {
        fprintf(stderr, "tcmctl: unexpected answer to ping\n");
        return EXIT_DAEMON;
    }
    double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
    const Tcm__Pong *p = resp->pong;
    if (json)
        printf("{\"ok\":true,\"daemon_pid\":%u,\"version\":\"%s\",\"protocol\":%u,\"uptime_ms\":%llu,"
               "\"rtt_us\":%.1f}\n",
               p->daemon_pid, p->daemon_version, p->version, (unsigned long long)p->uptime_ms, us);
    else
        printf("tcmd %s (pid %u) on %s: alive, up %llus, round trip %.0f us\n", p->daemon_version,
               p->daemon_pid, path, (unsigned long long)(p->uptime_ms / 1000), us);
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_stats(const char *path, bool json)
{
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__StatsRequest sr = TCM__STATS_REQUEST__INIT;
    req.body_case = TCM__REQUEST__BODY_STATS;
    req.stats = &sr;
    Tcm__Response *resp = call(path, &req);
    if (resp->body_case != TCM__RESPONSE__BODY_STATS) {
        fprintf(stderr, "tcmctl: unexpected answer to stats\n");
        return EXIT_DAEMON;
    }
    const Tcm__Stats *s = resp->stats;
    if (json) {
        printf("{");
        for (size_t i = 0; i < s->n_stat; i++)
            printf("%s\"%s\":%llu", i ? "," : "", s->stat[i]->name, (unsigned long long)s->stat[i]->value);
        printf("}\n");
    } else {
        printf("# Heap\n");
        for (size_t i = 0; i < s->n_stat; i++) {
            char human[32] = "";
            if (strncmp(s->stat[i]->name, "bytes_", 6) == 0)
                tcm__format_size(s->stat[i]->value, human, sizeof human);
            printf("%-22s %16llu  %-8s %s\n", s->stat[i]->name, (unsigned long long)s->stat[i]->value,
                   human, s->stat[i]->help);
        }
    }
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_clients(const char *path, bool json)
{
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__ClientsRequest cr = TCM__CLIENTS_REQUEST__INIT;
    req.body_case = TCM__REQUEST__BODY_CLIENTS;
    req.clients = &cr;
    Tcm__Response *resp = call(path, &req);
    if (resp->body_case != TCM__RESPONSE__BODY_CLIENTS) {
        fprintf(stderr, "tcmctl: unexpected answer to clients\n");
        return EXIT_DAEMON;
    }
    const Tcm__Clients *cl = resp->clients;
    if (json) {
        printf("[");
        for (size_t i = 0; i < cl->n_client; i++) {
            const Tcm__ClientInfo *c = cl->client[i];
            printf("%s{\"client_id\":%u,\"pid\":%u,\"uid\":%u,\"threads\":%u,\"bytes_held\":%llu,"
                   "\"bytes_cached\":%llu,\"requests\":%llu,\"errors\":%llu,\"attached_unix\":%llu}",
                   i ? "," : "", c->client_id, c->pid, c->uid, c->threads,
                   (unsigned long long)c->bytes_held, (unsigned long long)c->bytes_cached,
                   (unsigned long long)c->requests, (unsigned long long)c->errors,
                   (unsigned long long)c->attached_unix);
        }
        printf("]\n");
    } else {
        printf("%6s %8s %6s %7s %12s %12s %10s %6s\n", "id", "pid", "uid", "threads", "held", "cached",
               "requests", "errors");
        for (size_t i = 0; i < cl->n_client; i++) {
            const Tcm__ClientInfo *c = cl->client[i];
            char held[32], cached[32];
            printf("%6u %8u %6u %7u %12s %12s %10llu %6llu\n", c->client_id, c->pid, c->uid, c->threads,
                   tcm__format_size(c->bytes_held, held, sizeof held),
                   tcm__format_size(c->bytes_cached, cached, sizeof cached), (unsigned long long)c->requests,
                   (unsigned long long)c->errors);
        }
        if (cl->n_client == 0)
            printf("(no clients attached)\n");
    }
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_release(const char *path, bool json)
{
    Tcm__Request req = TCM__REQUEST__INIT;
    Tcm__ReleaseRequest rr = TCM__RELEASE_REQUEST__INIT;
    req.body_case = TCM__REQUEST__BODY_RELEASE;
    req.release = &rr;
    Tcm__Response *resp = call(path, &req);
    if (resp->body_case != TCM__RESPONSE__BODY_RELEASED) {
        fprintf(stderr, "tcmctl: unexpected answer to release\n");
        return EXIT_DAEMON;
    }
    const Tcm__Released *r = resp->released;
    char a[32], b[32], c[32];
    if (json)
        printf("{\"released_bytes\":%llu,\"committed_before\":%llu,\"committed_after\":%llu}\n",
               (unsigned long long)r->released_bytes, (unsigned long long)r->committed_before,
               (unsigned long long)r->committed_after);
    else
        printf("released %s; heap backed by %s before, %s now\n",
               tcm__format_size(r->released_bytes, a, sizeof a),
               tcm__format_size(r->committed_before, b, sizeof b),
               tcm__format_size(r->committed_after, c, sizeof c));
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

int main(int argc, char **argv)
{
    char pathbuf[108];
    const char *path = NULL;
    bool json = false;
    static const struct option opts[] = {
        {"socket", required_argument, 0, 's'},
        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "+s:jh", opts, NULL)) != -1) {
        switch (opt) {
        case 's': path = optarg; break;
        case 'j': json = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!path)
        path = tcm__default_socket(pathbuf, sizeof pathbuf);
    const char *cmd = argv[optind];
    if (optind + 1 < argc) {
        fprintf(stderr, "tcmctl: %s takes no arguments\n", cmd);
        return EXIT_USAGE;
    }
    if (strcmp(cmd, "ping") == 0)
        return cmd_ping(path, json);
    if (strcmp(cmd, "stats") == 0)
        return cmd_stats(path, json);
    if (strcmp(cmd, "clients") == 0)
        return cmd_clients(path, json);
    if (strcmp(cmd, "release") == 0)
        return cmd_release(path, json);
    if (strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "tcmctl: unknown command '%s'\n", cmd);
    usage(stderr);
    return EXIT_USAGE;
}
