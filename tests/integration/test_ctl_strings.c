/* Root names are written by any client that can attach (tcm_root_set takes
 * any byte but NUL) and tcmctl prints them: `tcmctl roots` must show them
 * with no byte that acts on a terminal (ESC sequences, C1 controls,
 * bidirectional overrides) or forges a row (a newline), and `--json roots`
 * must be valid JSON that gives the names back. */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tcm.h"
#include "testutil.h"

static const char *const names[] = {
    "clear\x1b[2J\nforged 0x1000",  /* clears the screen, then a fake row */
    "csi\xc2\x9b" "31m",            /* U+009B, the one-byte CSI, as UTF-8 */
    "notutf8\xff\xc0\xaf",          /* a byte that is never UTF-8, an overlong '/' */
    "bidi\xe2\x80\xae" "cod.exe",   /* U+202E RIGHT-TO-LEFT OVERRIDE */
    "bell\a\x7f",                   /* BEL, DEL */
    "plain-\xc3\xa9t\xc3\xa9",      /* UTF-8 text stays as it is */
    "back\\x1b",                    /* a backslash: shown escaped, not read as one */
};
#define NNAMES (sizeof names / sizeof names[0])

/* what the table must show for each (the escaped name) */
static const char *const shown[NNAMES] = {
    "clear\\x1b[2J\\x0aforged 0x1000", "csi\\u009b31m", "notutf8\\xff\\xc0\\xaf", "bidi\\u202ecod.exe",
    "bell\\x07\\x7f",                   "plain-\xc3\xa9t\xc3\xa9", "back\\\\x1b",
};

/* what a JSON parser must read back (Python literals; bytes that are not
 * UTF-8 come back as U+FFFD) */
static const char *const parsed[NNAMES] = {
    "'clear\\x1b[2J\\nforged 0x1000'", "'csi\\x9b31m'", "'notutf8\\ufffd\\ufffd\\ufffd'", "'bidi\\u202ecod.exe'",
    "'bell\\x07\\x7f'", "'plain-\\xe9t\\xe9'", "'back\\\\x1b'",
};

/* true unless s is UTF-8 without a code point a terminal acts on: C0
 * controls other than the newline ending each row, DEL, C1 controls, the
 * bidirectional embeddings, overrides and isolates */
static bool has_raw_control(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int len = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 : (*p & 0xf8) == 0xf0 ? 4 : 0;
        if (!len)
            return true;
        unsigned c = len == 1 ? *p : *p & (0x7fu >> len);
        for (int i = 1; i < len; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return true;
            c = c << 6 | (p[i] & 0x3fu);
        }
        if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000))
            return true; /* overlong */
        if ((c < 0x20 && c != '\n') || (c >= 0x7f && c <= 0x9f) || (c >= 0x202a && c <= 0x202e) ||
            (c >= 0x2066 && c <= 0x2069))
            return true;
        p += len;
    }
    return false;
}

int main(void)
{
    tcm_test_daemon_t d;
    tt_daemon_start(&d, NULL);
    CHECK_EQ(tcm_init(d.socket), 0);
    void *p = tcm_malloc(64);
    CHECK(p != NULL);
    for (size_t i = 0; i < NNAMES; i++)
        CHECK_EQ(tcm_root_set(names[i], p), 0);

    static char out[16384];
    CHECK_EQ(tt_tcmctl(&d, "roots", out, sizeof out), 0);
    fputs(out, stdout);
    CHECK(!has_raw_control(out));
    size_t rows = 0;
    for (const char *q = out; (q = strchr(q, '\n')); q++)
        rows++;
    CHECK_EQ(rows, NNAMES); /* the newline in a name forged no row */
    for (size_t i = 0; i < NNAMES; i++) {
        if (!strstr(out, shown[i]))
            fprintf(stderr, "tcmctl roots does not show '%s'\n", shown[i]);
        CHECK(strstr(out, shown[i]) != NULL);
    }

    CHECK_EQ(tt_tcmctl(&d, "--json roots", out, sizeof out), 0);
    fputs(out, stdout);
    CHECK(!has_raw_control(out));
    /* Python's parser reads the names back (the script in a file: no shell
     * quoting between it and python3) */
    char script[256], cmd[768];
    snprintf(script, sizeof script, "/tmp/tcmtest-%d-json.py", (int)getpid());
    FILE *f = fopen(script, "w");
    CHECK(f != NULL);
    fprintf(f, "import json, sys\n"
               "got = sorted(r['name'] for r in json.loads(sys.stdin.buffer.read().decode('utf-8')))\n"
               "want = sorted([");
    for (size_t i = 0; i < NNAMES; i++)
        fprintf(f, "%s%s", i ? ", " : "", parsed[i]);
    fprintf(f, "])\nprint('json names:', got)\nsys.exit(0 if got == want else 1)\n");
    CHECK_EQ(fclose(f), 0);
    snprintf(cmd, sizeof cmd, "%s --socket %s --json roots | python3 %s 2>&1", TCMCTL_PATH, d.socket, script);
    int rc = tt_run(cmd, out, sizeof out);
    unlink(script);
    fputs(out, stdout);
    CHECK_EQ(rc, 0);

    for (size_t i = 0; i < NNAMES; i++)
        CHECK_EQ(tcm_root_set(names[i], NULL), 0);
    tcm_free(p);
    tcm_shutdown();
    tt_daemon_stop(&d);
    return 0;
}
