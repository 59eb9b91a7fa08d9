"""What the Python tests and benchmark drivers share: a free TCP port,
waiting for a tcmd to answer, and checks that count their failures."""
import contextlib
import os
import sys
import socket
import subprocess
import time


def free_port():
    """A port nothing listens on now (the kernel's pick)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_tcmd(tcmctl, sock, seconds=10):
    """True once `tcmctl ping` answers on sock."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if os.path.exists(sock) and subprocess.run([tcmctl, "--socket", sock, "ping"],
                                                   capture_output=True).returncode == 0:
            return True
        time.sleep(0.05)
    return False


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
    def section(self, name, timed=False):
        """A part of the run: an exception in it fails that part, and the
        next part still runs."""
        t0 = time.time()
        try:
            yield
            if timed:
                print(f"done {name} ({time.time() - t0:.1f} s)")
        except Exception as e:  # noqa: BLE001 - reported, counted, and the next part runs
            self.checks += 1
            self.failures += 1
            print(f"FAILED: {name}: {type(e).__name__}: {e}", file=sys.stderr)
