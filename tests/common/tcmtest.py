"""What the Python tests and benchmark drivers share: a free TCP port and
waiting for a tcmd to answer."""
import os
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
