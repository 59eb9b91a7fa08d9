#!/bin/sh
# tcmd.8.sh TCMD VERSION — writes tcmd(8) to stdout; its SETTINGS section
# comes from `tcmd --list-settings`, the table every other view reads.
set -eu
tcmd=$1 version=$2
cat <<HEAD
.TH TCMD 8 "" "tcm $version" "System Administration"
.SH NAME
tcmd \- the tcm shared-memory heap daemon
.SH SYNOPSIS
.B tcmd
[\fB\-\-socket\fR \fIPATH\fR] [\fB\-\-name\fR \fINAME\fR] [\fB\-\-config\fR \fIFILE\fR] [\fB\-\-foreground\fR] [\fIsetting options\fR]
.SH DESCRIPTION
.B tcmd
creates a heap in POSIX shared memory, mapped at the same address in every
attached process, and serves the page heap and central free lists behind
the thread caches of processes linked with libtcm (see \fBtcm\fR(3)). Its
heap outlives it: a tcmd started on the same socket and name adopts the
heap a killed or stopped one left, and clients wait for it.
.SH OPTIONS
.TP
\fB\-\-socket\fR \fIPATH\fR
control socket (default \$TCM_SOCKET, else \$XDG_RUNTIME_DIR/tcm/tcmd.sock, else /tmp/tcm-UID/tcmd.sock)
.TP
\fB\-\-name\fR \fINAME\fR
shared-memory name (default derived from the socket path)
.TP
\fB\-\-config\fR \fIFILE\fR
key = value lines of the settings below; SIGHUP reloads it; the command line overrides it
.TP
\fB\-\-log\fR \fIFILE\fR
log file (default: stderr in the foreground, SOCKET.log otherwise)
.TP
\fB\-\-metrics\-port\fR \fIP\fR, \fB\-\-metrics\-addr\fR \fIA\fR
serve Prometheus metrics at http://A:P/metrics (address default 127.0.0.1); that page lists no pids
.TP
\fB\-\-metrics\-socket\fR \fIPATH\fR
serve the same page on a Unix socket made as the control socket is; root and tcmd's user get it with the
clients' pids there, in a pool of connections of their own
.TP
\fB\-\-discard\-heap\fR
replace the heap a previous tcmd left under this name instead of adopting it
.TP
\fB\-\-foreground\fR
do not detach
.TP
\fB\-\-list\-settings\fR
print the settings, tab-separated
.SH SETTINGS
Each is a command-line option (\fB\-\-heap\-size\fR for heap_size), a key of
the \fB\-\-config\fR file, and, where marked runtime, can be changed while
tcmd runs with \fBtcmctl config set\fR.
HEAD
"$tcmd" --list-settings | awk -F '\t' '{
    opt = $1; gsub(/_/, "\\-", opt)
    printf ".TP\n\\fB\\-\\-%s\\fR \\fI%s\\fR (%s)\n%s", opt, $4, $1, $5
    if ($3 != "") printf "; default %s", $3
    if ($2 == "yes") printf "; runtime"
    printf "\n"
}'
cat <<TAIL
.SH FILES
The socket's directory is created if missing (mode 0700; with
\fB\-\-allow\-group\fR 0710 and that group). tcmd refuses to start when
that directory is a symbolic link, belongs to another user or may be
written by others: its default one (\$XDG_RUNTIME_DIR/tcm or
/tmp/tcm\-UID) must be its own user's and writable by it alone; any other
must belong to its user or root and, if others may write there, be sticky
like /tmp. The log (SOCKET.log or \fB\-\-log\fR) is never opened through a
symbolic link: a new one is created with mode 0600, an existing one is
appended to only if it is a regular file of tcmd's user (\fB\-\-log\fR may
also name a device such as /dev/null).
.TP
.I SOCKET
the control socket; \fISOCKET\fR.log the log (in the background, without
\fB\-\-log\fR); \fISOCKET\fR.heap, while the heap lives, the options a tcmd
needs to adopt it (\fBtcmctl\fR prints it when nobody answers on the
socket).
.TP
.I /dev/shm/tcm.NAME.heap, .meta, .state, .lock, .ch.N
the heap, its metadata (clients map it read-only), tcmd's recovery state,
the lock that makes tcmd one per name, and each client's channel. They
outlive a tcmd stopped with clients attached or killed, for the next one.
.TP
.I /etc/tcm/tcmd.conf
the packaged unit's \fB\-\-config\fR file.
.TP
.I /etc/tcm/client.conf
root's file naming the \fBdaemon_uid\fR (and \fBsocket\fR) a set-user-ID
client may trust (\fBtcm\fR(3), ENVIRONMENT).
.SH ENVIRONMENT
.TP
.B TCM_SOCKET
the socket when \fB\-\-socket\fR is not given.
.TP
.B XDG_RUNTIME_DIR
where the default socket's directory is (else /tmp/tcm\-UID).
.SH SIGNALS
SIGTERM and SIGINT stop tcmd: with no client attached it removes the heap,
otherwise it leaves it for the next tcmd. SIGHUP reloads the config file.
.SH SEE ALSO
\fBtcmctl\fR(1), \fBtcm\fR(3), \fBtcm-kv\fR(1)
TAIL
