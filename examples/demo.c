/* tcm-demo — several processes sharing ONE heap, in the shape users copy:
 *
 *   1. attach to tcmd and publish a table in the shared heap as a root;
 *   2. fork workers: each allocates messages and puts their pointers in
 *      the table (a pointer from tcm_malloc is valid in every process);
 *   3. run an unrelated process (this program again, with --consume) that
 *      finds the table by its name, reads every message and frees it;
 *   4. show what tcmd saw (`tcmctl stats`, `tcmctl clients`).
 *
 * Needs a running tcmd on $TCM_SOCKET or the default socket. Exit status 0
 * when the consumer found every message intact, 1 otherwise. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tcm.h>

#define ROOT "demo.table"
#define WORKERS 4
#define PER_WORKER 1000

typedef struct table {
    _Atomic uint32_t filled;            /* workers done */
    char *msg[WORKERS][PER_WORKER];     /* pointers into the shared heap */
} table_t;

static int worker(table_t *t, int w)
{
    for (int i = 0; i < PER_WORKER; i++) {
        size_t len = 48 + (size_t)(i % 7) * 100; /* messages of several sizes */
        char *m = tcm_malloc(len);
        if (!m)
            return 1;
        snprintf(m, len, "worker %d (pid %d) message %d", w, (int)getpid(), i);
        t->msg[w][i] = m;
    }
    atomic_fetch_add(&t->filled, 1);
    return 0;
}

static int consume(void)
{
    table_t *t = tcm_root_get(ROOT);
    if (!t) {
        fprintf(stderr, "consumer: no root \"%s\" (is tcmd the same one?)\n", ROOT);
        return 1;
    }
    int bad = 0;
    for (int w = 0; w < WORKERS; w++)
        for (int i = 0; i < PER_WORKER; i++) {
            char want[64];
            snprintf(want, sizeof want, "worker %d (pid ", w);
            char *m = t->msg[w][i];
            if (!m || strncmp(m, want, strlen(want)) != 0 || atoi(strrchr(m, ' ') + 1) != i)
                bad++;
            tcm_free(m); /* freed by a process that did not allocate it */
            t->msg[w][i] = NULL;
        }
    printf("consumer (pid %d): read and freed %d messages from %d workers, %d wrong\n", (int)getpid(),
           WORKERS * PER_WORKER, WORKERS, bad);
    return bad != 0;
}

static void tcmctl(const char *self, const char *cmd)
{
    char path[4096], line[4200];
    snprintf(path, sizeof path, "%s", self);
    char *slash = strrchr(path, '/');
    snprintf(slash ? slash + 1 : path, sizeof path - (size_t)(slash ? slash + 1 - path : 0), "../tcmctl");
    if (access(path, X_OK) != 0)
        snprintf(path, sizeof path, "tcmctl");
    snprintf(line, sizeof line, "%s %s", path, cmd);
    printf("\n$ tcmctl %s\n", cmd);
    fflush(stdout);
    if (system(line) != 0)
        fprintf(stderr, "tcm-demo: `%s` failed\n", line);
}

int main(int argc, char **argv)
{
    if (tcm_init(NULL) != 0) {
        fprintf(stderr, "tcm-demo: no tcmd answers on $TCM_SOCKET or the default socket (start tcmd)\n");
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "--consume") == 0)
        return consume();

    table_t *t = tcm_calloc(1, sizeof *t);
    if (!t || tcm_root_set(ROOT, t) != 0)
        return 1;
    printf("table of %d x %d messages at %p in the shared heap, published as \"%s\"\n", WORKERS, PER_WORKER,
           (void *)t, ROOT);
    pid_t pids[WORKERS];
    for (int w = 0; w < WORKERS; w++)
        if ((pids[w] = fork()) == 0)
            _exit(worker(t, w)); /* the child attaches as a client of its own */
    int failed = 0;
    for (int w = 0; w < WORKERS; w++) {
        int st;
        waitpid(pids[w], &st, 0);
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    printf("%u workers filled the table (forked children, each its own tcm client)\n", atomic_load(&t->filled));
    tcmctl(argv[0], "clients");

    pid_t c = fork();
    if (c == 0) {
        execl("/proc/self/exe", argv[0], "--consume", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(c, &st, 0);
    failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;

    tcm_root_set(ROOT, NULL);
    tcm_free(t);
    tcmctl(argv[0], "stats");
    tcm_shutdown();
    printf("\n%s\n", failed ? "tcm-demo: FAILED" : "tcm-demo: every message crossed processes intact");
    return failed;
}
