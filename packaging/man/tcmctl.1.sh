#!/bin/sh
# tcmctl.1.sh TCMCTL VERSION — writes tcmctl(1) to stdout; its COMMANDS
# section comes from `tcmctl --list-commands`, the table tcmctl's own help
# is printed from (cli/tcmctl.c).
set -eu
tcmctl=$1 version=$2
cat <<'HEAD' | sed "s/@VERSION@/$version/"
.TH TCMCTL 1 "" "tcm @VERSION@" "User Commands"
.SH NAME
tcmctl \- inspect and steer a running tcmd
.SH SYNOPSIS
.B tcmctl
[\fB\-\-socket\fR \fIPATH\fR] [\fB\-\-json\fR] \fICOMMAND\fR [\fIARGS\fR]
.SH DESCRIPTION
Talks to \fBtcmd\fR(8) over its control socket. Human tables by default,
\fB\-\-json\fR for scripts (field names are stable), \fBtcmctl\fR \fICOMMAND\fR
\fB\-\-help\fR for one command, \fB\-\-version\fR for tcmctl's version.
.PP
Strings that came from tcmd or from a client (root names, which any client
sets, messages) are printed escaped, so that none can act on the terminal or
break the JSON: in tables a control character or a byte that is not UTF\-8
as \fB\\x\fR\fIHH\fR, a C1 control or a bidirectional override as
\fB\\u\fR\fIHHHH\fR, a backslash as \fB\\\\\fR; in JSON controls as
\fB\\u\fR\fIHHHH\fR and bytes that are not UTF\-8 as U+FFFD.
.SH COMMANDS
HEAD
# NAME, ARGS, HELP: the name bold; in ARGS options and literal words bold,
# placeholders (upper case) italic, brackets and bars as they are
"$tcmctl" --list-commands | awk -F '\t' '{
    line = "\\fB" $1 "\\fR"
    n = split($2, word, " ")
    for (i = 1; i <= n; i++) {
        w = word[i]; pre = w; sub(/[^[]*$/, "", pre); post = w; sub(/^[^]]*/, "", post)
        core = substr(w, length(pre) + 1, length(w) - length(pre) - length(post))
        if (core ~ /^--/) { gsub(/-/, "\\-", core); core = "\\fB" core "\\fR" }
        else if (core ~ /^[A-Z_]+$/) core = "\\fI" core "\\fR"
        else if (core ~ /^[a-z]+$/) core = "\\fB" core "\\fR"
        line = line " " pre core post
    }
    printf ".TP\n%s\n%s\n", line, $3
}'
cat <<'TAIL'
.SH ENVIRONMENT
.TP
.B TCM_SOCKET
the socket when \fB\-\-socket\fR is not given
.TP
.B TCM_DAEMON_UID
the uid tcmd must run as; without it tcmctl talks only to a tcmd of its own
user, root, or (on a socket given explicitly) the sole owner of the socket's
directory, and exits 3 naming the uid of any other
.SH EXIT STATUS
0 success, 1 tcmd answered with an error, 2 usage, 3 cannot connect.
.SH SEE ALSO
\fBtcmd\fR(8), \fBtcm\fR(3)
TAIL
