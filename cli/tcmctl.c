/* tcmctl — the control CLI. Human tables by default, --json for scripts,
 * --watch for a refreshing view. Exit codes: 0 success, 1 the daemon
 * answered with an error, 2 usage, 3 cannot connect. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "frame.h"
#include "heapprof.h"
#include "prim.h"
#include "tcm_version.h"
#include "util.h"
#include "views.h"

enum { EXIT_DAEMON = 1, EXIT_USAGE = 2, EXIT_CONNECT = 3 };

typedef struct ctx {
    const char *socket;
    bool json;
} ctx_t;

typedef struct command {
    const char *name;
    const char *args;
    const char *help;
    int (*run)(const ctx_t *ctx, int argc, char **argv);
} command_t;

/* Every string tcmctl prints came from tcmd, and some from any client that
 * can attach (root names, set with tcm_root_set, may hold any byte but NUL).
 * Escaped before printing, so that such a string can neither act on the
 * terminal (ESC sequences, C1 controls, bidirectional overrides, a newline
 * forging a row) nor make --json output invalid.
 *
 * The length of the valid UTF-8 sequence at s, its code point in *cp; 0 if
 * the bytes there are not one (a stray continuation byte, an overlong form,
 * a surrogate, a code point past U+10FFFF, a sequence cut short). */
static int utf8_seq(const unsigned char *s, uint32_t *cp)
{
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    int len = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (!len)
        return 0;
    uint32_t c = len == 1 ? s[0] : s[0] & (0x7fu >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) /* also stops at the NUL */
            return 0;
        c = c << 6 | (s[i] & 0x3fu);
    }
    if (c < min[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

/* Code points that change how a terminal shows what follows them: C0 and
 * C1 controls, DEL, and the bidirectional embeddings, overrides and
 * isolates. */
static bool is_control(uint32_t c)
{
    return c < 0x20 || (c >= 0x7f && c <= 0x9f) || (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069);
}

/* s escaped, as text (controls as \xHH below 0x80, \uHHHH above; bytes that are not UTF-8
 * as \xHH, a backslash as \\, so that what is shown names one string) or as
 * the inside of a JSON string (quotes, backslashes and controls escaped;
 * bytes that are not UTF-8, which JSON cannot carry, as U+FFFD). Four
 * rotating buffers so one printf can use several; a string too long for one
 * ends in "...". */
static const char *escape(const char *s, bool json)
{
    static char bufs[4][2048];
    static unsigned next;
    char *out = bufs[next++ % 4];
    size_t n = 0;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        if (n + 16 >= sizeof bufs[0]) {
            memcpy(out + n, "...", 3);
            n += 3;
            break;
        }
        uint32_t c;
        int len = utf8_seq(p, &c);
        if (!len) {
            n += (size_t)(json ? snprintf(out + n, 16, "\\ufffd") : snprintf(out + n, 16, "\\x%02x", *p));
            p++;
            continue;
        }
        if (c == '"' && json) {
            memcpy(out + n, "\\\"", 2);
            n += 2;
        } else if (c == '\\') {
            memcpy(out + n, "\\\\", 2);
            n += 2;
        } else if (is_control(c)) {
            n += (size_t)(json || c >= 0x80 ? snprintf(out + n, 16, "\\u%04x", (unsigned)c)
                                           : snprintf(out + n, 16, "\\x%02x", (unsigned)c));
        } else {
            memcpy(out + n, p, (size_t)len);
            n += (size_t)len;
        }
        p += len;
    }
    out[n] = 0;
    return out;
}

/* s for a JSON string; s for a terminal (see escape) */
static const char *js(const char *s)
{
    return escape(s, true);
}

static const char *tx(const char *s)
{
    return escape(s, false);
}

/* Nobody answers on socket: a heap that outlived its tcmd left the options
 * that adopt it (tcmd writes SOCKET.heap while it runs, and removes it
 * with the heap). */
static void say_how_to_start(const char *socket)
{
    char path[160], line[512];
    snprintf(path, sizeof path, "%s.heap", socket);
    FILE *f = fopen(path, "r");
    if (f && fgets(line, sizeof line, f) && !strncmp(line, "tcmd ", 5))
        fprintf(stderr, "tcmctl: a heap waits for its tcmd here (its clients wait for it); start one that adopts it "
                        "with: %s", line);
    else
        fprintf(stderr, "tcmctl: is tcmd running? start it with: tcmd --socket %s\n", socket);
    if (f)
        fclose(f);
}

static Tcm__Response *call(const ctx_t *ctx, Tcm__Request *req)
{
    tcm_handle_t fd = tcm__connect_server(ctx->socket);
    if (fd < 0) {
        fprintf(stderr, "tcmctl: cannot connect to tcmd on %s: %s\n", ctx->socket,
                fd == -EPERM && *tcm__server_refusal() ? tcm__server_refusal() : strerror(-fd));
        if (fd == -ENOENT || fd == -ECONNREFUSED)
            say_how_to_start(ctx->socket);
        exit(EXIT_CONNECT);
    }
    req->version = TCM_PROTO_VERSION;
    int err = tcm__frame_send(fd, req);
    Tcm__Response *resp = err ? NULL : tcm__frame_recv(fd, 10000);
    if (!resp) {
        fprintf(stderr, "tcmctl: no answer from tcmd on %s: %s\n", ctx->socket, strerror(err ? -err : errno));
        exit(EXIT_CONNECT);
    }
    tcm__close(fd);
    if (resp->body_case == TCM__RESPONSE__BODY_ERROR) {
        if (ctx->json) {
            printf("{\"error\":{");
            tcm__json_members(stdout, &resp->error->base, NULL, 0, js);
            printf("}}\n");
        }
        fprintf(stderr, "tcmctl: tcmd: %s\n", tx(resp->error->message));
        exit(EXIT_DAEMON);
    }
    return resp;
}

/* Send a request whose body is `body` at case `which`; exit unless the
 * answer has case `want`. */
static Tcm__Response *ask(const ctx_t *ctx, Tcm__Request__BodyCase which, void *body,
                          Tcm__Response__BodyCase want)
{
    Tcm__Request req = TCM__REQUEST__INIT;
    req.body_case = which;
    /* every body member of the oneof shares one pointer */
    req.hello = body;
    Tcm__Response *resp = call(ctx, &req);
    if (resp->body_case != want) {
        fprintf(stderr, "tcmctl: unexpected answer from tcmd\n");
        exit(EXIT_DAEMON);
    }
    return resp;
}

/* A command's usage and help from the table below, to stdout (asked for)
 * or stderr (a usage error, whose exit code it returns). */
static int command_usage(const char *name, FILE *f);

/* m as one JSON object, keyed by its protobuf field names */
static void print_json_object(const ProtobufCMessage *m)
{
    putchar('{');
    tcm__json_members(stdout, m, NULL, 0, js);
    printf("}\n");
}

static const char *human(uint64_t v, char *buf, size_t len)
{
    return tcm__format_size(v, buf, len);
}

static int cmd_ping(const ctx_t *ctx, int argc, char **argv)
{
    (void)argc, (void)argv;
    Tcm__Ping ping = TCM__PING__INIT;
    ping.nonce = tcm__pid();
    uint64_t t0 = tcm__now_ns();
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_PING, &ping, TCM__RESPONSE__BODY_PONG);
    double us = (double)(tcm__now_ns() - t0) / 1e3;
    const Tcm__Pong *p = resp->pong;
    /* ping's keys predate the field names: version is tcmd's, protocol the protocol's */
    static const tcm_json_key_t ping_keys[] = {
        {"nonce", NULL}, {"version", "protocol"}, {"daemon_version", "version"}};
    if (ctx->json) {
        printf("{\"ok\":true,");
        tcm__json_members(stdout, &p->base, ping_keys, sizeof ping_keys / sizeof ping_keys[0], js);
        printf(",\"rtt_us\":%.1f}\n", us);
    } else
        printf("tcmd %s (pid %u) on %s: alive, up %llus, round trip %.0f us\n", tx(p->daemon_version),
               p->daemon_pid, ctx->socket, (unsigned long long)(p->uptime_ms / 1000), us);
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_health(const ctx_t *ctx, int argc, char **argv)
{
    (void)argc, (void)argv;
    Tcm__HealthRequest hr = TCM__HEALTH_REQUEST__INIT;
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_HEALTH, &hr, TCM__RESPONSE__BODY_HEALTH);
    const Tcm__Health *h = resp->health;
    if (ctx->json)
        print_json_object(&h->base);
    else
        printf("%s: heap thread %s (%llu us), %u clients, up %llus, tcmd %s\n", h->ok ? "healthy" : "UNHEALTHY",
               h->heap_thread_ok ? "answers" : "does not answer", (unsigned long long)h->heap_thread_rtt_us,
               h->clients, (unsigned long long)(h->uptime_ms / 1000), tx(h->version));
    int rc = h->ok ? 0 : EXIT_DAEMON;
    tcm__response__free_unpacked(resp, NULL);
    return rc;
}

/* prev: the snapshot every seconds before (--watch), for the counters'
 * rates; NULL: none */
static void print_stats(const ctx_t *ctx, const Tcm__Stats *s, const Tcm__Stats *prev, double seconds)
{
    char buf[32];
    if (ctx->json) {
        printf("{");
        for (size_t i = 0; i < s->n_stat; i++) {
            if (s->stat[i]->is_float)
                printf("%s\"%s\":%.4f", i ? "," : "", js(s->stat[i]->name), s->stat[i]->fvalue);
            else
                printf("%s\"%s\":%llu", i ? "," : "", js(s->stat[i]->name), (unsigned long long)s->stat[i]->value);
        }
        if (s->service_time) {
            printf(",\"service_time\":{\"sum_ns\":%llu,\"buckets\":[", (unsigned long long)s->service_time->sum_ns);
            for (size_t i = 0; i < s->service_time->n_count; i++) {
                double up = s->service_time->upper_us[i];
                if (isinf(up))
                    printf("%s{\"le_us\":null,\"count\":%llu}", i ? "," : "",
                           (unsigned long long)s->service_time->count[i]);
                else
                    printf("%s{\"le_us\":%g,\"count\":%llu}", i ? "," : "", up,
                           (unsigned long long)s->service_time->count[i]);
            }
            printf("]}");
        }
        printf("}\n");
        return;
    }
    printf("# Heap\n");
    for (size_t i = 0; i < s->n_stat; i++) {
        const Tcm__Stat *st = s->stat[i];
        if (strncmp(st->name, "requests_", 9) == 0 && i && strncmp(s->stat[i - 1]->name, "requests_", 9) != 0)
            printf("# Requests\n");
        if (strncmp(st->name, "refused_", 8) == 0 && i && strncmp(s->stat[i - 1]->name, "refused_", 8) != 0)
            printf("# Refused\n");
        char rate[32] = "";
        if (prev && st->counter && i < prev->n_stat && !strcmp(prev->stat[i]->name, st->name) &&
            st->value >= prev->stat[i]->value)
            snprintf(rate, sizeof rate, "%.0f/s", (double)(st->value - prev->stat[i]->value) / seconds);
        int rw = seconds > 0 ? 10 : 0; /* the rates' column: --watch only */
        if (st->is_float)
            printf("%-22s %16.3f  %-8s %*s%s%s\n", tx(st->name), st->fvalue, "", rw, rate, rw ? " " : "",
                   tx(st->help));
        else
            printf("%-22s %16llu  %-8s %*s%s%s\n", tx(st->name), (unsigned long long)st->value,
                   strstr(st->name, "bytes") ? human(st->value, buf, sizeof buf) : "", rw, rate, rw ? " " : "",
                   tx(st->help));
    }
    if (s->service_time && s->service_time->n_count) {
        printf("# Service time (heap thread)\n");
        uint64_t total = 0;
        for (size_t i = 0; i < s->service_time->n_count; i++)
            total += s->service_time->count[i];
        for (size_t i = 0; i < s->service_time->n_count; i++) {
            if (!s->service_time->count[i])
                continue;
            double up = s->service_time->upper_us[i];
            char le[32];
            if (isinf(up))
                snprintf(le, sizeof le, "slower");
            else
                snprintf(le, sizeof le, "< %g us", up);
            printf("%-22s %16llu  %5.1f%%\n", le, (unsigned long long)s->service_time->count[i],
                   total ? 100.0 * (double)s->service_time->count[i] / (double)total : 0.0);
        }
    }
}

static int cmd_stats(const ctx_t *ctx, int argc, char **argv);

static void print_view(const ctx_t *ctx, const tcm_view_t *v, ProtobufCMessage *const *rows, size_t n)
{
    if (ctx->json)
        tcm__view_print_json(stdout, v, rows, n);
    else
        tcm__view_print_table(stdout, v, rows, n);
}

/* A JSON array of messages, each an object of all its fields. */
static void print_json_array(ProtobufCMessage *const *rows, size_t n)
{
    putchar('[');
    for (size_t i = 0; i < n; i++) {
        printf("%s{", i ? "," : "");
        tcm__json_members(stdout, rows[i], NULL, 0, js);
        putchar('}');
    }
    putchar(']');
}

/* clients --dead [N]: what departed clients left allocated, largest first */
static int cmd_departed(const ctx_t *ctx, uint32_t limit)
{
    Tcm__DepartedRequest dr = TCM__DEPARTED_REQUEST__INIT;
    dr.limit = limit;
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_DEPARTED, &dr, TCM__RESPONSE__BODY_DEPARTED);
    const Tcm__Departed *d = resp->departed;
    if (ctx->json) {
        printf("{\"holders\":%u,\"bytes_held\":%llu,\"departed\":", d->holders, (unsigned long long)d->bytes_held);
        print_json_array((ProtobufCMessage *const *)d->holder, d->n_holder);
        printf("}\n");
    } else {
        printf("%-5s %6s %8s %6s %6s %10s %19s %-16s %s\n", "kind", "id", "pid", "uid", "procs", "held", "departed",
               "name", "executable");
        for (size_t i = 0; i < d->n_holder; i++) {
            const Tcm__DepartedHolder *h = d->holder[i];
            char held[32], when[32];
            tcm__format_size(h->bytes_held, held, sizeof held);
            tcm__format_time(h->departed_unix, when, sizeof when);
            printf("%-5s %6u %8u %6u %6u %10s %19s %-16s %s\n", h->group ? "group" : "proc", h->client_id, h->pid,
                   h->uid, h->processes, held, when, tx(h->name), tx(h->exe));
        }
        char total[32];
        tcm__format_size(d->bytes_held, total, sizeof total);
        if (d->holders)
            printf("(%u of %u shown; %s held by departed clients in all)\n", (unsigned)d->n_holder, d->holders,
                   total);
        else
            printf("(no departed client holds anything)\n");
    }
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_clients(const ctx_t *ctx, int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "--dead") == 0) {
        char *end = "";
        unsigned long n = argc == 2 ? strtoul(argv[1], &end, 10) : 0;
        if (argc > 2 || *end || n > UINT32_MAX)
            return command_usage("clients", stderr);
        return cmd_departed(ctx, (uint32_t)n);
    }
    if (argc)
        return command_usage("clients", stderr);
    Tcm__ClientsRequest cr = TCM__CLIENTS_REQUEST__INIT;
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_CLIENTS, &cr, TCM__RESPONSE__BODY_CLIENTS);
    print_view(ctx, &tcm__view_clients, (ProtobufCMessage *const *)resp->clients->client, resp->clients->n_client);
    if (!ctx->json && resp->clients->n_client == 0)
        printf("(no clients attached)\n");
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_classes(const ctx_t *ctx, int argc, char **argv)
{
    (void)argc, (void)argv;
    Tcm__ClassesRequest cr = TCM__CLASSES_REQUEST__INIT;
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_CLASSES, &cr, TCM__RESPONSE__BODY_CLASSES);
    print_view(ctx, &tcm__view_classes, (ProtobufCMessage *const *)resp->classes->cls, resp->classes->n_cls);
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static void print_config(const ctx_t *ctx, const Tcm__Config *cfg)
{
    if (ctx->json) {
        printf("{");
        static const tcm_json_key_t setting_keys[] = {{"key", NULL}, {"help", NULL}}; /* keyed by key */
        for (size_t i = 0; i < cfg->n_setting; i++) {
            printf("%s\"%s\":{", i ? "," : "", js(cfg->setting[i]->key));
            tcm__json_members(stdout, &cfg->setting[i]->base, setting_keys,
                              sizeof setting_keys / sizeof setting_keys[0], js);
            putchar('}');
        }
        printf("}\n");
        return;
    }
    for (size_t i = 0; i < cfg->n_setting; i++) {
        const Tcm__Setting *s = cfg->setting[i];
        printf("%-16s = %-16s %-9s %s\n", tx(s->key), tx(s->value), s->runtime ? "" : "(startup)", tx(s->help));
    }
}

static int cmd_config(const ctx_t *ctx, int argc, char **argv)
{
    Tcm__Response *resp;
    if (argc >= 1 && strcmp(argv[0], "get") == 0 && argc <= 2) {
        Tcm__ConfigGet get = TCM__CONFIG_GET__INIT;
        get.key = argc == 2 ? argv[1] : "";
        resp = ask(ctx, TCM__REQUEST__BODY_CONFIG_GET, &get, TCM__RESPONSE__BODY_CONFIG);
    } else if (argc == 3 && strcmp(argv[0], "set") == 0) {
        Tcm__ConfigSet set = TCM__CONFIG_SET__INIT;
        set.key = argv[1];
        set.value = argv[2];
        resp = ask(ctx, TCM__REQUEST__BODY_CONFIG_SET, &set, TCM__RESPONSE__BODY_CONFIG);
    } else
        return command_usage("config", stderr);
    print_config(ctx, resp->config);
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_resize(const ctx_t *ctx, int argc, char **argv)
{
    uint64_t limit;
    if (argc != 1)
        return command_usage("resize", stderr);
    if (tcm__parse_size(argv[0], &limit)) {
        fprintf(stderr, "tcmctl: '%s' is not a size (a number of bytes, or with K, M, G or T: 512M, 4G)\n", argv[0]);
        return EXIT_USAGE;
    }
    Tcm__Resize rs = TCM__RESIZE__INIT;
    rs.limit = limit;
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_RESIZE, &rs, TCM__RESPONSE__BODY_RESIZED);
    char a[32], b[32];
    if (ctx->json)
        print_json_object(&resp->resized->base);
    else
        printf("heap limit %s -> %s\n", human(resp->resized->old_limit, a, sizeof a),
               human(resp->resized->new_limit, b, sizeof b));
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_release(const ctx_t *ctx, int argc, char **argv)
{
    (void)argc, (void)argv;
    Tcm__ReleaseRequest rr = TCM__RELEASE_REQUEST__INIT;
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_RELEASE, &rr, TCM__RESPONSE__BODY_RELEASED);
    const Tcm__Released *r = resp->released;
    char a[32], b[32], c[32];
    if (ctx->json)
        print_json_object(&r->base);
    else
        printf("released %s; heap backed by %s before, %s now\n", human(r->released_bytes, a, sizeof a),
               human(r->committed_before, b, sizeof b), human(r->committed_after, c, sizeof c));
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_roots(const ctx_t *ctx, int argc, char **argv)
{
    (void)argc, (void)argv;
    Tcm__RootsRequest rr = TCM__ROOTS_REQUEST__INIT;
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_ROOTS, &rr, TCM__RESPONSE__BODY_ROOTS);
    const Tcm__Roots *r = resp->roots;
    if (ctx->json) {
        print_json_array((ProtobufCMessage *const *)r->root, r->n_root);
        putchar('\n');
    } else {
        for (size_t i = 0; i < r->n_root; i++)
            printf("%-48s 0x%llx\n", tx(r->root[i]->name), (unsigned long long)r->root[i]->offset);
        if (!r->n_root)
            printf("(no roots)\n");
    }
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_detach(const ctx_t *ctx, int argc, char **argv)
{
    char *end;
    unsigned long id = argc == 1 ? strtoul(argv[0], &end, 10) : 0;
    if (argc != 1 || *end || !id)
        return command_usage("detach", stderr);
    Tcm__Detach d = TCM__DETACH__INIT;
    d.client_id = (uint32_t)id;
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_DETACH, &d, TCM__RESPONSE__BODY_DETACHED);
    if (ctx->json)
        print_json_object(&resp->detached->base);
    else
        printf("client %u (pid %u) detached: its allocations fail from now on; its caches are reclaimed when "
               "it exits\n",
               resp->detached->client_id, resp->detached->pid);
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

/* quota [set USER[:NAME] SIZE | clear USER[:NAME]] */
static int cmd_quota(const ctx_t *ctx, int argc, char **argv)
{
    Tcm__QuotaRequest qr = TCM__QUOTA_REQUEST__INIT;
    char who[64];
    if (argc) {
        bool set = strcmp(argv[0], "set") == 0;
        if ((!set && strcmp(argv[0], "clear") != 0) || argc != (set ? 3 : 2) || strlen(argv[1]) >= sizeof who)
            return command_usage("quota", stderr);
        snprintf(who, sizeof who, "%s", argv[1]);
        char *colon = strchr(who, ':');
        qr.name = "";
        if (colon) {
            *colon = 0;
            qr.name = colon + 1;
        }
        if (tcm__user_id(who, &qr.uid) != 0) {
            fprintf(stderr, "tcmctl: no user '%s'\n", who);
            return EXIT_USAGE;
        }
        if (set && (tcm__parse_size(argv[2], &qr.limit) || !qr.limit)) {
            fprintf(stderr, "tcmctl: '%s' is not a size (e.g. 64M; clear removes a quota)\n", argv[2]);
            return EXIT_USAGE;
        }
        qr.change = true;
    }
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_QUOTA, &qr, TCM__RESPONSE__BODY_QUOTAS);
    const Tcm__Quotas *q = resp->quotas;
    if (ctx->json) {
        printf("{\"uid_quota\":%llu,\"quotas\":", (unsigned long long)q->uid_quota);
        print_json_array((ProtobufCMessage *const *)q->quota, q->n_quota);
        printf("}\n");
    } else {
        char dflt[32];
        printf("%8s %-16s %10s %10s %8s\n", "uid", "name", "limit", "held", "refused");
        for (size_t i = 0; i < q->n_quota; i++) {
            const Tcm__QuotaInfo *e = q->quota[i];
            char limit[32], held[32];
            if (e->limit)
                tcm__format_size(e->limit, limit, sizeof limit);
            else
                snprintf(limit, sizeof limit, "-");
            tcm__format_size(e->bytes_held, held, sizeof held);
            printf("%8u %-16s %10s %10s %8llu%s\n", e->uid, e->name[0] ? tx(e->name) : "(all)", limit, held,
                   (unsigned long long)e->refused, e->rule || !e->limit ? "" : "  (uid_quota)");
        }
        if (q->uid_quota)
            printf("(every other user but root and tcmd's: %s, the uid_quota setting)\n",
                   tcm__format_size(q->uid_quota, dflt, sizeof dflt));
        else if (!q->n_quota)
            printf("(no quota is set, and nobody holds anything)\n");
    }
    tcm__response__free_unpacked(resp, NULL);
    return 0;
}

static int cmd_check(const ctx_t *ctx, int argc, char **argv)
{
    (void)argc, (void)argv;
    Tcm__CheckRequest cr = TCM__CHECK_REQUEST__INIT;
    Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_CHECK, &cr, TCM__RESPONSE__BODY_CHECK);
    const Tcm__CheckResult *r = resp->check;
    if (ctx->json)
        print_json_object(&r->base);
    else
        printf("%s: %s (%llu us)\n",
               r->ok ? "heap consistent" : r->client_only ? "heap consistent, A CLIENT'S CACHES ARE NOT" : "HEAP INCONSISTENT",
               tx(r->message), (unsigned long long)r->duration_us);
    int rc = r->ok ? 0 : EXIT_DAEMON;
    tcm__response__free_unpacked(resp, NULL);
    return rc;
}

/* Every page of the heap profile's process records or samples: the replies
 * go into resps (kept: the records point into them), their entries into
 * *items. */
static bool fetch_profile(const ctx_t *ctx, uint32_t pid, bool procs, Tcm__Response ***resps, size_t *nresps,
                          void ***items, size_t *nitems, uint64_t *interval)
{
    Tcm__HeapProfileRequest pr = TCM__HEAP_PROFILE_REQUEST__INIT;
    pr.pid = pid;
    pr.procs = procs;
    do {
        Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_HEAP_PROFILE, &pr, TCM__RESPONSE__BODY_HEAP_PROFILE);
        const Tcm__HeapProfile *hp = resp->heap_profile;
        size_t add = procs ? hp->n_proc : hp->n_sample;
        Tcm__Response **r = realloc(*resps, (*nresps + 1) * sizeof *r);
        void **it = realloc(*items, (*nitems + add + 1) * sizeof *it);
        if (r)
            *resps = r;
        if (it)
            *items = it;
        if (!r || !it) {
            tcm__response__free_unpacked(resp, NULL);
            return false;
        }
        r[(*nresps)++] = resp;
        memcpy(it + *nitems, procs ? (void **)hp->proc : (void **)hp->sample, add * sizeof *it);
        *nitems += add;
        *interval = hp->interval;
        if (hp->next && hp->next <= pr.from) /* a page that does not move on would never end */
            break;
        pr.from = hp->next;
    } while (pr.from);
    return true;
}

static void print_top(const ctx_t *ctx, const tcm_hp_t *hp, const tcm_hp_site_t *sites, long n, unsigned long top)
{
    double bytes = 0;
    for (long i = 0; i < n; i++)
        bytes += sites[i].bytes;
    if (ctx->json) {
        printf("{\"interval\":%llu,\"samples\":%zu,\"bytes\":%.0f,\"sites\":[", (unsigned long long)hp->interval,
               hp->nsamples, bytes);
        for (long i = 0; i < n && (unsigned long)i < top; i++) {
            const tcm_hp_site_t *s = &sites[i];
            printf("%s{\"function\":\"%s\",\"file\":\"%s\",\"line\":%d,\"bytes\":%.0f,\"objects\":%.0f,"
                   "\"processes\":%u,\"pids\":[", i ? "," : "", js(s->func), js(s->file), s->line, s->bytes,
                   s->objects, s->procs);
            for (uint32_t k = 0; k < s->procs && k < sizeof s->pids / sizeof s->pids[0]; k++)
                printf("%s%u", k ? "," : "", s->pids[k]);
            printf("]}");
        }
        printf("]}\n");
        return;
    }
    char total[32];
    tcm__format_size((uint64_t)bytes, total, sizeof total);
    printf("%zu samples (one per %llu bytes allocated, on average) stand for %s in use\n", hp->nsamples,
           (unsigned long long)hp->interval, total);
    printf("%10s %6s %10s %6s  %s\n", "bytes", "%", "objects", "procs", "site");
    for (long i = 0; i < n && (unsigned long)i < top; i++) {
        const tcm_hp_site_t *s = &sites[i];
        char b[32], where[300] = "";
        tcm__format_size((uint64_t)s->bytes, b, sizeof b);
        if (s->file[0])
            snprintf(where, sizeof where, "  %s:%d", tx(s->file), s->line);
        printf("%10s %5.1f%% %10.0f %6u  %s%s\n", b, bytes > 0 ? 100 * s->bytes / bytes : 0.0, s->objects, s->procs,
               tx(s->func), where);
    }
}

static int cmd_heap_profile(const ctx_t *ctx, int argc, char **argv)
{
    unsigned long pid = 0, top = 0;
    const char *output = "-";
    for (int i = 0; i < argc; i++) {
        char *end = "";
        if (!strcmp(argv[i], "--pid") && i + 1 < argc)
            pid = strtoul(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--top") && i + 1 < argc)
            top = strtoul(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--output") && i + 1 < argc)
            output = argv[++i];
        else
            return command_usage("heap-profile", stderr);
        if (*end || pid > UINT32_MAX)
            return command_usage("heap-profile", stderr);
    }
    if (!top && !strcmp(output, "-") && tcm__is_terminal(1)) {
        fprintf(stderr, "tcmctl: the profile is gzipped protobuf: give --output FILE (or --top N for text)\n");
        return EXIT_USAGE;
    }
    Tcm__Response **resps = NULL;
    size_t nresps = 0;
    tcm_hp_t hp = {0};
    bool ok = fetch_profile(ctx, 0, true, &resps, &nresps, (void ***)&hp.procs, &hp.nprocs, &hp.interval) &&
              fetch_profile(ctx, (uint32_t)pid, false, &resps, &nresps, (void ***)&hp.samples, &hp.nsamples,
                            &hp.interval);
    int rc = 0;
    if (!ok) {
        fprintf(stderr, "tcmctl: out of memory\n");
        rc = EXIT_DAEMON;
    } else if (top) {
        tcm_hp_site_t *sites = NULL;
        long n = tcm__hp_top(&hp, &sites);
        if (n < 0) {
            fprintf(stderr, "tcmctl: out of memory\n");
            rc = EXIT_DAEMON;
        } else {
            print_top(ctx, &hp, sites, n, top);
        }
        free(sites);
    } else {
        char err[256];
        FILE *f = strcmp(output, "-") ? fopen(output, "wb") : stdout;
        if (!f || tcm__hp_pprof(&hp, f, err, sizeof err) != 0 || (f != stdout && fclose(f) != 0)) {
            fprintf(stderr, "tcmctl: %s: %s\n", output, f ? err : strerror(errno));
            rc = EXIT_DAEMON;
        } else if (f != stdout && !ctx->json) {
            fprintf(stderr, "tcmctl: %zu samples of %zu processes written to %s\n", hp.nsamples, hp.nprocs, output);
        }
    }
    for (size_t i = 0; i < nresps; i++)
        tcm__response__free_unpacked(resps[i], NULL);
    free(resps), free(hp.procs), free(hp.samples);
    return rc;
}

/* The one list of commands: tcmctl --help, tcmctl COMMAND --help, a usage
 * error, tcmctl(1) (packaging/man/tcmctl.1.sh, from --list-commands) and
 * the README's command list (tests/readme_test.py) all come from it. */
static const command_t commands[] = {
    {"ping", "", "check that tcmd answers: pid, version, uptime, round trip", cmd_ping},
    {"health", "", "ping the heap thread too; exit 1 if it does not answer", cmd_health},
    {"stats", "[--watch SECONDS [--count N]]",
     "heap, request and refusal figures, service-time histogram; --watch: again every SECONDS, with each counter's "
     "rate per second",
     cmd_stats},
    {"clients", "[--dead [N]]",
     "attached processes: pid, uid, threads, bytes held and cached, requests, errors; --dead: what departed ones "
     "left allocated (the N largest, by process and by executable)",
     cmd_clients},
    {"classes", "", "size classes: spans, objects in use and free, batches moved", cmd_classes},
    {"config", "get [KEY] | set KEY VALUE",
     "read or change settings (set: tcmd's uid or root); the keys are tcmd's settings", cmd_config},
    {"resize", "SIZE", "change the heap limit, e.g. to 512M or 4G (refused below what is in use)", cmd_resize},
    {"release", "", "processes give back what they cache, then every free page goes back to the OS", cmd_release},
    {"roots", "", "named shared pointers and their heap offsets", cmd_roots},
    {"quota", "[set USER[:NAME] SIZE | clear USER[:NAME]]",
     "memory quotas: what each user (or each user's processes of one name) may hold, holds and was refused; set "
     "and clear: tcmd's uid or root",
     cmd_quota},
    {"detach", "CLIENT_ID",
     "cut a client (an id from tcmctl clients) off: its allocations fail; reclaimed when it exits", cmd_detach},
    {"check", "",
     "validate the whole heap (tcmd's uid or root); exit 1 naming the first inconsistency, of tcmd's "
     "structures or of a client's caches",
     cmd_check},
    {"heap-profile", "[--pid PID] [--output FILE | --top N]",
     "who holds the heap: the sampled allocations still in use (profile_sample), of every process or PID, alive or "
     "departed, as a gzipped pprof profile (go tool pprof FILE) or the top N allocation sites (function, file:line "
     "where the binaries have DWARF, bytes, objects, processes); tcmd's uid or root",
     cmd_heap_profile},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static int cmd_stats(const ctx_t *ctx, int argc, char **argv)
{
    double every = 0;
    long count = -1;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--watch") == 0 && i + 1 < argc)
            every = atof(argv[++i]);
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc)
            count = atol(argv[++i]);
        else
            return command_usage("stats", stderr);
    }
    if (argc && every <= 0) {
        fprintf(stderr, "tcmctl: --watch needs a positive number of seconds\n");
        return EXIT_USAGE;
    }
    Tcm__Response *prev = NULL;
    uint64_t prev_ns = 0;
    for (long n = 0; count < 0 || n < count; n++) {
        Tcm__StatsRequest sr = TCM__STATS_REQUEST__INIT;
        Tcm__Response *resp = ask(ctx, TCM__REQUEST__BODY_STATS, &sr, TCM__RESPONSE__BODY_STATS);
        uint64_t now_ns = tcm__now_ns();
        if (every > 0 && !ctx->json && tcm__is_terminal(1))
            printf("\033[H\033[2J"); /* top-like: redraw in place */
        if (every > 0 && !ctx->json) {
            time_t now = time(NULL);
            printf("tcmd on %s, every %gs, %s", ctx->socket, every, ctime(&now));
        }
        /* counters as rates over the last interval, from the second one on */
        print_stats(ctx, resp->stats, prev ? prev->stats : NULL, prev ? (double)(now_ns - prev_ns) / 1e9 : every);
        fflush(stdout);
        if (prev)
            tcm__response__free_unpacked(prev, NULL);
        prev = resp;
        prev_ns = now_ns;
        if (every <= 0)
            break;
        if (count < 0 || n + 1 < count)
            tcm__sleep_ns((uint64_t)(every * 1e9));
    }
    if (prev)
        tcm__response__free_unpacked(prev, NULL);
    return 0;
}

static int command_usage(const char *name, FILE *f)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0)
            fprintf(f, "usage: tcmctl [--socket PATH] [--json] %s %s\n  %s\n", commands[i].name, commands[i].args,
                    commands[i].help);
    return EXIT_USAGE;
}

/* the table for tcmctl(1) and the README's test: NAME, ARGS, HELP a line */
static void list_commands(void)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        printf("%s\t%s\t%s\n", commands[i].name, commands[i].args, commands[i].help);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tcmctl [--socket PATH] [--json] COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-8s %-30s %s\n", commands[i].name, commands[i].args, commands[i].help);
    fprintf(f,
            "\n  --socket PATH  tcmd's socket (default $TCM_SOCKET, else $XDG_RUNTIME_DIR/tcm/tcmd.sock,\n"
            "                 else /tmp/tcm-UID/tcmd.sock)\n"
            "  --json         machine-readable output (field names are stable; see README)\n"
            "  --version      tcmctl's version (tcmctl ping: tcmd's)\n"
            "  tcmctl COMMAND --help   help for one command\n"
            "\nexit codes: 0 success, 1 tcmd answered with an error, 2 usage, 3 cannot connect\n");
}

int main(int argc, char **argv)
{
    char pathbuf[108];
    ctx_t ctx = {0};
    static const struct option opts[] = {
        {"socket", required_argument, 0, 's'},
        {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {"list-commands", no_argument, 0, 'L'}, /* for tcmctl(1) and the README's test */
        {0, 0, 0, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "+s:jh", opts, NULL)) != -1) {
        switch (opt) {
        case 's': ctx.socket = optarg; break;
        case 'j': ctx.json = true; break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("tcmctl %s\n", TCM_VERSION_STRING); return 0;
        case 'L': list_commands(); return 0;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!ctx.socket)
        ctx.socket = tcm__default_socket(pathbuf, sizeof pathbuf);
    const char *name = argv[optind];
    int cargc = argc - optind - 1;
    char **cargv = argv + optind + 1;
    if (strcmp(name, "help") == 0 && cargc == 0) {
        usage(stdout);
        return 0;
    }
    static char *help_argv[] = {"--help", NULL};
    if (strcmp(name, "help") == 0) { /* tcmctl help COMMAND */
        name = cargv[0];
        cargc = 1;
        cargv = help_argv;
    }
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(name, commands[i].name) != 0)
            continue;
        if (cargc == 1 && (strcmp(cargv[0], "--help") == 0 || strcmp(cargv[0], "-h") == 0)) {
            command_usage(name, stdout);
            return 0;
        }
        if (!commands[i].args[0] && cargc) {
            fprintf(stderr, "tcmctl: %s takes no arguments\n", name);
            return EXIT_USAGE;
        }
        return commands[i].run(&ctx, cargc, cargv);
    }
    fprintf(stderr, "tcmctl: unknown command '%s'\n", name);
    usage(stderr);
    return EXIT_USAGE;
}
