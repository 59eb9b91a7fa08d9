"""What the Python tests and benchmark drivers share: a free TCP port,
waiting for a tcmd to answer, a private tcmd per test case, and checks that
count their failures."""
import contextlib
import os
import shutil
import signal
import sys
import socket
import subprocess
import tempfile
import time


def free_port():
    """A port nothing listens on now (the kernel's pick)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_until(cond, seconds=10, step=0.02):
    """Polls cond() until it is true or seconds have passed; returns its last
    value. The wait for an observed state (a stat, a log line), with a
    deadline: never a sleep that guesses how long the other side takes."""
    deadline = time.time() + seconds
    while True:
        got = cond()
        if got or time.time() >= deadline:
            return got
        time.sleep(step)


def count_in_file(path, text):
    """How many times text stands in the file at path (0 if it is not there)."""
    try:
        with open(path, errors="replace") as f:
            return f.read().count(text)
    except OSError:
        return 0


def wait_tcmd(tcmctl, sock, seconds=10):
    """True once `tcmctl ping` answers on sock."""
    return wait_until(lambda: os.path.exists(sock) and subprocess.run([tcmctl, "--socket", sock, "ping"],
                                                                      capture_output=True).returncode == 0,
                      seconds, step=0.05)


def terminate(p, timeout):
    """SIGTERM to tcmd or a server (a Popen), sent again every 3 s while it
    lives, and its exit status within timeout seconds; None if it is still
    running (tt_terminate in testutil.c says why: TSan can lose a SIGTERM)."""
    deadline = time.time() + timeout
    while True:
        p.terminate()
        try:
            return p.wait(timeout=max(0.01, min(3, deadline - time.time())))
        except subprocess.TimeoutExpired:
            if time.time() >= deadline:
                return None


class Tcmd:
    """A private tcmd for one test case: its own directory, socket, heap name
    and log, so that no case sees what an earlier one configured. stop()
    runs the whole-heap validator, then SIGTERM; it returns whether both were
    clean (and the heap's segments gone)."""

    seq = 0

    def __init__(self, build, prefix, args=(), config=None, **popen):
        Tcmd.seq += 1
        self.tcmctl = os.path.join(build, "tcmctl")
        self.dir = tempfile.mkdtemp(prefix=f"tcm-{prefix}-")
        self.sock = os.path.join(self.dir, "tcmd.sock")
        self.log = os.path.join(self.dir, "tcmd.log")
        self.name = f"{prefix}{os.getpid()}-{Tcmd.seq}"
        self.conf = None
        if config is not None:
            self.conf = os.path.join(self.dir, "tcmd.conf")
            with open(self.conf, "w") as f:
                f.write(config)
            args = ("--config", self.conf, *args)
        self.p = subprocess.Popen([os.path.join(build, "tcmd"), "--foreground", "--socket", self.sock, "--name",
                                   self.name, "--log", self.log, *args], **popen)
        self.pid = self.p.pid
        if not wait_tcmd(self.tcmctl, self.sock):
            self.kill()
            raise RuntimeError(f"tcmd did not start; its log: {self.log_tail()}")

    def log_tail(self, lines=30):
        try:
            with open(self.log) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()

    def stop(self):
        if self.p.poll() is not None:
            return False
        checked = subprocess.run([self.tcmctl, "--socket", self.sock, "check"], capture_output=True,
                                 timeout=60).returncode == 0
        rc = terminate(self.p, 20)
        if rc is None:
            self.kill()
            return False
        clean = checked and rc == 0 and not os.path.exists(f"/dev/shm/tcm.{self.name}.heap")
        if clean:  # (a failed case keeps its directory: the log is in it)
            shutil.rmtree(self.dir, ignore_errors=True)
        return clean


class Helper:
    """tcm_test_helper serve: a real client process of the tcmd on sock,
    driven a line at a time (do("alloc 1000 1000") answers "ok")."""

    def __init__(self, build, sock):
        self.p = subprocess.Popen([os.path.join(build, "tests", "tcm_test_helper"), "serve"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=dict(os.environ, TCM_SOCKET=sock))
        self.pid = int(self.p.stdout.readline().split()[1])

    def do(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self):
        self.do("exit")
        self.p.wait(timeout=10)


class Tally:
    """Checks that report and count a failure and let the run go on."""

    def __init__(self):
        self.failures = 0
        self.checks = 0

    def check(self, cond, what):
        """One assertion: a failure is reported and counted, and the run goes on."""
        self.checks += 1
        if not cond:
            self.failures += 1
            print("FAILED:", what, file=sys.stderr)
        return cond

    @contextlib.contextmanager
    def section(self, name, timed=False, timeout=None):
        """A part of the run: an exception in it fails that part, and the
        next part still runs; so does a part that outlasts timeout seconds
        (SIGALRM: a read that hangs raises)."""
        t0 = time.time()
        if timeout:
            def expired(_signum, _frame):
                raise TimeoutError(f"still running after {timeout} s")
            signal.signal(signal.SIGALRM, expired)
            signal.alarm(timeout)
        try:
            yield
            if timed:
                print(f"done {name} ({time.time() - t0:.1f} s)")
        except Exception as e:  # noqa: BLE001 - reported, counted, and the next part runs
            self.checks += 1
            self.failures += 1
            print(f"FAILED: {name}: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            if timeout:
                signal.alarm(0)

    @contextlib.contextmanager
    def case(self, build, name, timeout=120, timed=False, **tcmd):
        """A test case against a tcmd of its own (Tcmd's arguments in tcmd),
        in a section with a timeout; the tcmd is stopped and checked at its
        end, and its log shown if the case failed."""
        failures = self.failures
        with self.section(name, timed=timed, timeout=timeout):
            d = Tcmd(build, **tcmd)
            try:
                yield d
            finally:
                self.check(d.stop(), f"{name}: tcmd's heap consistent and its exit clean")
                if self.failures > failures:
                    print(f"tcmd's log ({d.log}), its last lines:\n{d.log_tail()}", file=sys.stderr)
