#!/usr/bin/env python3
"""tcm-kv end to end: a real tcmd, a real tcm-kv with several worker
processes, driven by redis-cli, redis-benchmark and raw sockets. Every
command against its expected reply; values written through one connection
read through others (so through every worker); frees in one worker seen by
tcm; eviction under --maxmemory; expiry, lazy and swept; workers SIGKILLed
under load, while holding a stripe lock and between two stores of a change;
tcmd killed and restarted under load; bad input of every kind. The cases
run tcm-kv, the server that is installed, but for the two that kill a worker
inside a lock or between two stores: they need DEBUG HOLD and DEBUG CRASH,
which only tcm-kv-test (the same sources with KV_TEST_HOOKS) has. Each case
runs against a tcmd and a tcm-kv of its own (so none depends on what an
earlier one did to them), even if an earlier one failed, with a timeout;
the summary counts them."""
import atexit
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "common"))
from tcmtest import count_in_file, free_port, terminate, wait_tcmd, wait_until  # noqa: E402

build = sys.argv[1]
TCMD = os.path.join(build, "tcmd")
TCMCTL = os.path.join(build, "tcmctl")
KV = os.path.join(build, "examples", "tcm-kv")
KV_TEST = os.path.join(build, "examples", "tcm-kv-test")  # with the test hooks (DEBUG)
tmp = tempfile.mkdtemp(prefix="tcm-kv-test-")
SOCK = NAME = None  # the current case's tcmd: its socket and heap name (fresh_names)
CASE_TIMEOUT = 120  # seconds, a case


def fresh_names(seq):
    """Socket and heap name for case seq's tcmd: no case adopts another's heap."""
    global SOCK, NAME
    SOCK = os.path.join(tmp, "tcmd-%d.sock" % seq)
    NAME = "kvtest%d-%d" % (os.getpid(), seq)


@atexit.register
def remove_heap():
    """A tcmd stopped while a (killed) worker is still recorded leaves its
    heap for the next tcmd; the test's heaps go with the test."""
    for f in glob.glob("/dev/shm/tcm.kvtest%d-*" % os.getpid()):
        os.unlink(f)
WORKERS = 3


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)



def ctl(*args):
    r = subprocess.run([TCMCTL, "--socket", SOCK, *args], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, f"tcmctl {' '.join(args)}: {r.stderr}")
    return r.stdout


def stats():
    return json.loads(ctl("--json", "stats"))


def attached(pid):
    return any(c["pid"] == pid for c in json.loads(ctl("--json", "clients")))


def stat(name):
    return stats()[name]


class Tcmd:
    def __init__(self):
        self.start()

    def start(self):
        self.log = open(os.path.join(tmp, "tcmd-%s.log" % NAME), "a")
        self.p = subprocess.Popen([TCMD, "--socket", SOCK, "--name", NAME, "--foreground"], stdout=self.log,
                                  stderr=self.log)
        check(wait_tcmd(TCMCTL, SOCK), "tcmd did not start")

    def kill(self):
        self.p.kill()
        self.p.wait()

    def stop(self):
        if terminate(self.p, 20) is None:
            raise subprocess.TimeoutExpired(TCMD, 20)


class Server:
    def __init__(self, *args, workers=WORKERS, env=None, binary=KV):
        self.port = free_port()
        self.log_path = os.path.join(tmp, "kv-%d.log" % self.port)
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen([binary, "--socket", SOCK, "--port", str(self.port), "--workers", str(workers),
                                   *args], stdout=self.log, stderr=self.log,
                                  start_new_session=True, env=dict(os.environ, **(env or {})))
        # up once every worker serves: the first PING may reach a worker
        # while the others are still attaching (seconds under TSan)
        for _ in range(400):
            try:
                if Conn(self.port).cmd("PING") == "PONG" and int(self.info("server")["workers"]) == workers:
                    return
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(0.05)
        raise Failed(f"tcm-kv did not start {workers} workers: " + open(self.log_path).read())

    def stop(self):
        st = terminate(self.p, 20)
        check(st is not None, "tcm-kv did not stop within 20 s of SIGTERM")
        check(st == 0, "tcm-kv exited badly on SIGTERM")

    def info(self, section=""):
        c = Conn(self.port)
        text = c.cmd("INFO", *([section] if section else []))
        c.close()
        return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)

    def worker_pids(self):
        """The workers' pids, from the master's children."""
        out = subprocess.run(["pgrep", "-P", str(self.p.pid)], capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]


class RespError(Exception):
    pass


class Conn:
    """A raw RESP2 client: exact replies, errors as RespError values."""

    def __init__(self, port, timeout=10):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self):
        self.s.close()

    def send(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)

    def _line(self):
        while b"\r\n" not in self.buf:
            more = self.s.recv(65536)
            if not more:
                raise ConnectionError("closed by the server")
            self.buf += more
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            more = self.s.recv(max(65536, n - len(self.buf)))
            if not more:
                raise ConnectionError("closed by the server")
            self.buf += more
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self._exact(n + 2)[:-2]
            try:
                return data.decode()
            except UnicodeDecodeError:
                return data
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise Failed(f"bad reply line {line!r}")

    def cmd(self, *args):
        self.send(*args)
        return self.reply()

    def closed(self, timeout=5):
        """True if the server closes the connection (after any replies)."""
        self.s.settimeout(timeout)
        try:
            while True:
                if not self.s.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def err(reply, prefix):
    return isinstance(reply, RespError) and str(reply).startswith(prefix)


def cli(port, *args):
    r = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0, f"redis-cli {' '.join(args)}: {r.stderr}")
    return r.stdout.rstrip("\n")


def connections_to_every_worker(srv):
    """Connections until each worker has served one; {pid: Conn}."""
    by_pid = {}
    deadline = time.time() + 20  # which worker accepts is the scheduler's choice: try for a while, not n times
    while time.time() < deadline:
        c = Conn(srv.port)
        pid = int(dict(line.split(":", 1) for line in c.cmd("INFO", "server").split("\r\n") if ":" in line)
                  ["process_id"])
        if pid in by_pid:
            c.close()
        else:
            by_pid[pid] = c
        if len(by_pid) == WORKERS:
            return by_pid
    raise Failed(f"20 s of connections reached only {len(by_pid)} of {WORKERS} workers")


# ---------------------------------------------------------------- cases


def test_commands(srv):
    c = Conn(srv.port)
    c.cmd("FLUSHALL")
    expect = [
        (("PING",), "PONG"), (("PING", "hi"), "hi"), (("ECHO", "x y"), "x y"),
        (("SET", "k", "v"), "OK"), (("GET", "k"), "v"), (("GET", "nope"), None),
        (("SET", "k", "w", "NX"), None), (("SET", "k", "w", "XX"), "OK"), (("GET", "k"), "w"),
        (("SET", "new", "1", "XX"), None), (("SET", "new", "1", "NX"), "OK"),
        (("SET", "k", "z", "GET"), "w"), (("GETSET", "k", "g"), "z"), (("GETSET", "none", "g"), None),
        (("DEL", "k", "none", "missing"), 2), (("EXISTS", "k", "new", "new"), 2),
        (("SET", "n", "10"), "OK"), (("INCR", "n"), 11), (("INCRBY", "n", "-21"), -10), (("DECR", "n"), -11),
        (("DECRBY", "n", "9"), -20), (("INCR", "fresh"), 1),
        (("SET", "big", "9223372036854775807"), "OK"),
        (("APPEND", "s", "ab"), 2), (("APPEND", "s", "cd"), 4), (("GET", "s"), "abcd"), (("STRLEN", "s"), 4),
        (("STRLEN", "nope"), 0),
        (("MSET", "a", "1", "b", "2", "c", "3"), "OK"), (("MGET", "a", "nope", "c"), ["1", None, "3"]),
        (("TTL", "a"), -1), (("TTL", "nope"), -2), (("PTTL", "nope"), -2), (("EXPIRE", "a", "100"), 1),
        (("TTL", "a"), 100), (("PERSIST", "a"), 1), (("PERSIST", "a"), 0), (("TTL", "a"), -1),
        (("EXPIRE", "nope", "10"), 0), (("PEXPIRE", "b", "100000"), 1), (("SET", "ex", "v", "EX", "50"), "OK"),
        (("TTL", "ex"), 50), (("SET", "ex", "v", "KEEPTTL"), "OK"), (("TTL", "ex"), 50),
        (("SET", "ex", "v"), "OK"), (("TTL", "ex"), -1),
        (("EXPIRE", "c", "-1"), 1), (("EXISTS", "c"), 0), (("SELECT", "0"), "OK"),
        (("CONFIG", "GET", "maxmemory"), ["maxmemory", "0"]), (("CONFIG", "GET", "save"), ["save", ""]),
        (("CONFIG", "GET", "nothing-like-it"), []), (("COMMAND", "COUNT"), 27),
    ]
    for args, want in expect:
        got = c.cmd(*args)
        check(got == want, f"{' '.join(args)}: got {got!r}, wanted {want!r}")
    pttl = c.cmd("PTTL", "b")
    check(99000 < pttl <= 100000, f"PTTL b: {pttl}")
    n = c.cmd("DBSIZE")
    check(n == 8, f"DBSIZE {n}, wanted 8 (new n fresh big s a b ex)")
    errors = [
        (("NOSUCH", "x"), "ERR unknown command 'NOSUCH', with args beginning with: 'x'"),
        (("GET",), "ERR wrong number of arguments for 'get' command"),
        (("SET", "k"), "ERR wrong number of arguments for 'set' command"),
        (("MSET", "a", "1", "b"), "ERR wrong number of arguments for 'mset' command"),
        (("INCR", "s"), "ERR value is not an integer or out of range"),
        (("INCRBY", "n", "x"), "ERR value is not an integer or out of range"),
        (("INCR", "big"), "ERR increment or decrement would overflow"),
        (("EXPIRE", "a", "soon"), "ERR value is not an integer or out of range"),
        (("SET", "k", "v", "EX", "0"), "ERR invalid expire time in 'set' command"),
        (("SET", "k", "v", "EX", "x"), "ERR value is not an integer or out of range"),
        (("SET", "k", "v", "NX", "XX"), "ERR syntax error"),
        (("SET", "k", "v", "BOGUS"), "ERR syntax error"),
        (("SELECT", "3"), "ERR DB index is out of range"),
        # the tests' hooks are in tcm-kv-test only
        (("DEBUG", "CRASH", "put"), "ERR unknown command 'DEBUG'"),
    ]
    for args, want in errors:
        got = c.cmd(*args)
        check(err(got, want), f"{' '.join(args)}: got {got!r}, wanted -{want}")
    check(c.cmd("GET", "k") is None, "failed SETs left k alone")
    info = srv.info()
    for field in ["redis_version", "connected_clients", "used_memory", "tcm_bytes_clients", "tcm_bytes_committed",
                  "total_commands_processed", "keyspace_hits", "db0"]:
        check(field in info, f"INFO has {field}")
    check(int(info["workers"]) == WORKERS, f"INFO workers {info['workers']}")
    check(c.cmd("FLUSHALL") == "OK" and c.cmd("DBSIZE") == 0, "FLUSHALL empties the table")
    # a real client, interactive and pipelined
    check(cli(srv.port, "SET", "cli", "hello world") == "OK", "redis-cli SET")
    check(cli(srv.port, "GET", "cli") == "hello world", "redis-cli GET")
    piped = subprocess.run(["redis-cli", "-p", str(srv.port), "--pipe"], input="".join(
        "*3\r\n$3\r\nSET\r\n$%d\r\npipe%d\r\n$1\r\nv\r\n" % (len("pipe%d" % i), i) for i in range(1000)),
        capture_output=True, text=True, timeout=30)
    check("errors: 0, replies: 1000" in piped.stdout, f"redis-cli --pipe: {piped.stdout}")
    check(c.cmd("DBSIZE") == 1001, "1000 piped SETs")
    c.send("QUIT")
    check(c.reply() == "OK" and c.closed(), "QUIT replies and closes")


def test_every_worker(srv):
    conns = connections_to_every_worker(srv)
    writer = next(iter(conns.values()))
    for i in range(500):
        writer.send("SET", "w%d" % i, "value-%d" % i * 10)
    for i in range(500):
        check(writer.reply() == "OK", "pipelined SET")
    for pid, c in conns.items():  # every worker reads what one wrote
        c.send(*(["MGET"] + ["w%d" % i for i in range(500)]))
        got = c.reply()
        check(got == ["value-%d" % i * 10 for i in range(500)], f"worker {pid} reads what another wrote")
    # an overwrite and a DEL in another worker free what the first allocated
    pids = list(conns)
    conns[pids[1]].cmd("SET", "w0", "changed")
    check(conns[pids[2]].cmd("GET", "w0") == "changed", "overwrite seen by a third worker")
    check(conns[pids[2]].cmd("DEL", "w1") == 1 and conns[pids[0]].cmd("GET", "w1") is None, "DEL seen")
    # frees reach tcm: 8 MB written through one worker, deleted through another, then tcmctl release
    big = "x" * 8000
    for i in range(1000):
        conns[pids[0]].send("SET", "big%d" % i, big)
    for i in range(1000):
        conns[pids[0]].reply()
    before = stat("bytes_in_use")
    conns[pids[1]].send(*(["DEL"] + ["big%d" % i for i in range(1000)]))
    check(conns[pids[1]].reply() == 1000, "DEL 1000 keys")
    # what clients hold, less what sits in their caches; a batch a worker
    # handed back without waiting counts as held until tcmd's next turn
    # (within a second: DESIGN, "Quiet posts")
    deadline = time.time() + 3
    while (after := stat("bytes_in_use")) > before - 7_000_000 and time.time() < deadline:
        time.sleep(0.05)
    check(before - after >= 7_000_000, f"frees in another worker reach tcm: bytes_in_use {before} -> {after}")
    for c in conns.values():
        c.close()


def test_expiry(srv):
    c = Conn(srv.port)
    c.cmd("FLUSHALL")
    c.cmd("SET", "short", "v", "PX", "100")
    time.sleep(0.25)
    check(c.cmd("GET", "short") is None, "a key past its expiry is gone when read")
    expired0 = int(srv.info("stats")["expired_keys"])
    for i in range(2000):
        c.send("SET", "vol%d" % i, "v", "PX", "1000")
    replies = [c.reply() for _ in range(2000)]
    # (not DBSIZE: under TSan 2000 SETs can outlast a short expiry)
    check(replies.count("OK") == 2000, "volatile keys set")
    deadline = time.time() + 10
    while time.time() < deadline and c.cmd("DBSIZE") > 0:
        time.sleep(0.2)
    expired = int(srv.info("stats")["expired_keys"]) - expired0
    check(c.cmd("DBSIZE") == 0, "the periodic sweep deleted keys nobody read")
    check(expired >= 2000, f"expired_keys grew by {expired}")


def test_eviction():
    srv = Server("--maxmemory", "4M")
    try:
        c = Conn(srv.port)
        c.cmd("FLUSHALL")
        value = "v" * 1000
        c.cmd("SET", "hot", "h")
        for batch in range(200):  # 20 MB through a 4 MB limit
            for i in range(batch * 100, batch * 100 + 100):
                c.send("SET", "e%d" % i, value)
            for _ in range(100):
                r = c.reply()
                check(r == "OK", f"SET under maxmemory: {r!r}")
            check(c.cmd("GET", "hot") == "h", f"the key in use survived eviction (batch {batch})")
        info = srv.info()
        used, evicted = int(info["used_memory"]), int(info["evicted_keys"])
        check(used <= 4 * 1024 * 1024 + 64 * 1024, f"used_memory {used} within maxmemory")
        check(evicted > 10000, f"evicted_keys {evicted}")
        check(c.cmd("GET", "hot") == "h", "the key in use survived eviction")
        check(c.cmd("GET", "e19999") == value, "the newest key is there")
        check(c.cmd("DBSIZE") < 5000, "old keys went")
    finally:
        srv.stop()


class Load:
    """Client threads that write their own keys and check every reply;
    a connection the server drops is opened again."""

    def __init__(self, port, threads=4):
        self.port, self.stop, self.wrong, self.ops, self.errors = port, False, [], 0, 0
        self.lock = threading.Lock()
        self.t = [threading.Thread(target=self.run, args=(i,)) for i in range(threads)]
        for t in self.t:
            t.start()

    def run(self, n):
        i = 0
        c = None
        while not self.stop:
            try:
                if c is None:
                    c = Conn(self.port, timeout=30)
                key, val = "load%d:%d" % (n, i % 500), "v%d-%d" % (n, i)
                r = c.cmd("SET", key, val)
                g = c.cmd("GET", key)
                if r != "OK" or g != val:
                    with self.lock:
                        self.wrong.append((key, val, r, g))
                i += 1
                with self.lock:
                    self.ops += 1
            except (OSError, ConnectionError):
                with self.lock:
                    self.errors += 1
                c = None
                time.sleep(0.01)

    def wait_ops(self, more, seconds=30, what="the load runs"):
        """Until more operations have been checked (a deadline, not a sleep)."""
        want, deadline = self.ops + more, time.time() + seconds
        while self.ops < want and time.time() < deadline:
            time.sleep(0.02)
        check(self.ops >= want, f"{what}: {self.ops - want + more} of {more} operations in {seconds} s")

    def finish(self):
        self.stop = True
        for t in self.t:
            t.join(60)
        check(not any(t.is_alive() for t in self.t), "client threads hung")


def wait_workers(srv, n, old=()):
    deadline = time.time() + 15
    while time.time() < deadline:
        pids = srv.worker_pids()
        if len(pids) == n and not set(pids) & set(old):
            return pids
        time.sleep(0.1)
    raise Failed(f"workers now {srv.worker_pids()}, wanted {n} new ones")


def seed_keys(port, n=1000, prefix="keep"):
    c = Conn(port)
    for i in range(n):
        c.send("SET", "%s%d" % (prefix, i), "kept-%d" % i)
    for i in range(n):
        check(c.reply() == "OK", "seed SET")
    c.close()


def check_keys(port, n=1000, prefix="keep"):
    c = Conn(port)
    c.send(*(["MGET"] + ["%s%d" % (prefix, i) for i in range(n)]))
    got = c.reply()
    c.close()
    bad = [i for i in range(n) if got[i] != "kept-%d" % i]
    check(not bad, f"{len(bad)} of {n} keys written before are wrong or gone (first: {bad[:5]})")


def test_worker_kill(srv):
    seed_keys(srv.port)
    died0, reclaimed0 = stat("clients_died"), stat("reclaimed_objects")
    bench = subprocess.Popen(["redis-benchmark", "-p", str(srv.port), "-t", "set,get", "-n", "100000000", "-r",
                              "100000", "-c", "20", "-P", "4", "-q"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    load = Load(srv.port)
    try:
        load.wait_ops(100)
        for k in range(3):
            pids = srv.worker_pids()
            victim = pids[k % len(pids)]
            # a worker killed before it attached is no client of tcmd's (a
            # respawned one under a sanitizer can take a while to attach)
            deadline = time.time() + 30
            while not attached(victim) and time.time() < deadline:
                time.sleep(0.05)
            check(attached(victim), f"worker {victim} attached to tcmd")
            os.kill(victim, signal.SIGKILL)
            wait_workers(srv, WORKERS, old=[victim])
            load.wait_ops(100)  # served on by the new worker and the others
    finally:
        bench.kill()
        bench.wait()
        load.finish()
    check(not load.wrong, f"wrong replies after worker kills: {load.wrong[:3]}")
    check(load.ops > 1000, f"only {load.ops} checked operations under load")
    check(Conn(srv.port).cmd("PING") == "PONG", "serving after the kills")
    check_keys(srv.port)
    check(int(srv.info()["worker_restarts"]) >= 3, "the master restarted the workers")
    deadline = time.time() + 10
    while stat("clients_died") < died0 + 3 and time.time() < deadline:
        time.sleep(0.1)
    check(stat("clients_died") >= died0 + 3, "tcmd saw the three workers die")
    check(stat("reclaimed_objects") > reclaimed0, "tcmd reclaimed the dead workers' caches")
    ctl("check")


def test_kill_holding_lock(srv):
    conns = connections_to_every_worker(srv)
    pids = list(conns)
    conns[pids[0]].cmd("SET", "locked", "before")
    repairs0 = int(srv.info("stats")["stripe_repairs"])
    conns[pids[0]].send("DEBUG", "HOLD", "locked", "10000")  # its worker sits in the stripe's lock
    held = 'DEBUG HOLD: pid %d holds the stripe lock of "locked"' % pids[0]
    check(wait_until(lambda: count_in_file(srv.log_path, held) == 1), "the worker says it holds the stripe lock")
    os.kill(pids[0], signal.SIGKILL)
    t0 = time.time()
    check(conns[pids[1]].cmd("GET", "locked") == "before", "a key of the dead worker's stripe is readable")
    check(time.time() - t0 < 2, "no wait for the dead lock holder")
    check(conns[pids[2]].cmd("SET", "locked", "after") == "OK" and conns[pids[1]].cmd("GET", "locked") == "after",
          "and writable")
    check(int(srv.info("stats")["stripe_repairs"]) == repairs0 + 1, "the stripe was repaired once")
    wait_workers(srv, WORKERS, old=[pids[0]])
    for c in conns.values():
        c.close()


def test_kill_mid_change():
    """SIGKILL between two stores of a change, at each crash point."""
    srv = Server(binary=KV_TEST)
    try:
        kill_mid_change(srv)
    finally:
        srv.stop()


def kill_mid_change(srv):
    c = Conn(srv.port)
    c.cmd("FLUSHALL")
    written = 0
    for point in ["put", "rehash", "migrate"]:
        victim = Conn(srv.port)
        pid = int(dict(line.split(":", 1) for line in victim.cmd("INFO", "server").split("\r\n") if ":" in line)
                  ["process_id"])
        check(victim.cmd("DEBUG", "CRASH", point) == "OK", "DEBUG CRASH")
        died = False
        for i in range(20000):  # enough SETs for every stripe to grow and rehash
            try:
                r = victim.cmd("SET", "mid%d" % written, "val%d" % written)
            except (OSError, ConnectionError):
                died = True
                break
            check(r == "OK", "SET before the crash point")
            written += 1
        check(died, f"the worker passed crash point {point} without dying")
        wait_workers(srv, WORKERS, old=[pid])
        c = Conn(srv.port)  # the worker of an older connection may have been the victim
        # the SET the worker died in may or may not have happened; everything before it is there
        c.send(*(["MGET"] + ["mid%d" % i for i in range(written)]))
        got = c.reply()
        bad = [i for i in range(written) if got[i] != "val%d" % i]
        check(not bad, f"after a death at {point}: {len(bad)} of {written} keys wrong (first {bad[:5]})")
        n = c.cmd("DBSIZE")
        check(n in (written, written + 1), f"after a death at {point}: DBSIZE {n}, {written} written")
        if n == written + 1:
            check(c.cmd("GET", "mid%d" % written) == "val%d" % written, "the interrupted SET is whole")
        c.cmd("DEL", "mid%d" % written)
    check(int(srv.info("stats")["stripe_repairs"]) >= 3, "each death was repaired")


def test_tcmd_restart(srv, tcmd):
    seed_keys(srv.port, prefix="rs")
    load = Load(srv.port)
    try:
        load.wait_ops(50)
        tcmd.kill()
        time.sleep(0.5)  # (not a wait for an event: the gap the workers live through)
        tcmd.start()
        load.wait_ops(50, what="serving after tcmd restarted")
    finally:
        load.finish()
    check(not load.wrong, f"wrong replies across the tcmd restart: {load.wrong[:3]}")
    check(load.errors == 0, f"{load.errors} connections dropped across the tcmd restart")
    check_keys(srv.port, prefix="rs")
    check(stat("restarts") >= 1, "tcmd adopted the heap")
    ctl("check")


def test_tcmd_gone(tcmd):
    """tcmd gone for good (no restart within the reconnect timeout): a
    write says so, not the maxmemory OOM text."""
    srv = Server(workers=1, env={"TCM_RECONNECT_TIMEOUT": "1"})
    try:
        c = Conn(srv.port)
        check(c.cmd("SET", "before", "x") == "OK", "a SET with tcmd up")
        tcmd.kill()
        reply = None
        for i in range(20):  # a write that needs tcmd: a new 2 MiB page run each time
            reply = c.cmd("SET", "big%d" % i, "v" * (2 << 20))
            if isinstance(reply, RespError):
                break
        check(err(reply, "ERR tcmd not running"), f"a write with tcmd gone: {reply!r}")
        tcmd.start()
    finally:
        if srv.p.poll() is None:
            os.killpg(srv.p.pid, signal.SIGKILL)
            srv.p.wait()


def test_bad_input(srv):
    good = Conn(srv.port)
    good.cmd("SET", "precious", "intact")

    def raw(data, expect_error=None):
        c = Conn(srv.port)
        c.s.sendall(data)
        if expect_error:
            r = c.reply()
            check(err(r, expect_error), f"{data[:40]!r}: got {r!r}, wanted -{expect_error}")
        check(c.closed(), f"{data[:40]!r}: connection closed")

    raw(b"*abc\r\n", "ERR Protocol error: invalid multibulk length")
    raw(b"*1\r\n$1000000000000\r\n", "ERR Protocol error: invalid bulk length")
    raw(b"*1000000000\r\n$3\r\nGET\r\n", "ERR Protocol error: invalid multibulk length")
    raw(b"*2\r\n$3\r\nGET\r\n!oops\r\n", "ERR Protocol error: expected '$'")
    raw(b"*1\r\n$4\r\nPINGxx", "ERR Protocol error")
    raw(b"x" * 100000, "ERR Protocol error: too big inline request")
    for _ in range(20):  # garbage: error replies, or a protocol error and a close; the server lives
        c = Conn(srv.port)
        c.s.sendall(os.urandom(4096))
        c.closed(timeout=0.1)
        c.close()
    # half-sent commands: a client that goes away, and one that finishes later
    c = Conn(srv.port)
    c.s.sendall(b"*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$100\r\nabc")
    c.close()
    c = Conn(srv.port)
    c.s.sendall(b"*3\r\n$3\r\nSET\r\n$4\r\nslow\r\n$5\r\nab")
    time.sleep(0.2)
    c.s.sendall(b"cde\r\n")
    check(c.reply() == "OK" and good.cmd("GET", "slow") == "abcde", "a command sent in two halves")
    check(good.cmd("GET", "half") is None, "a half-sent SET did nothing")
    c.close()
    # inline commands, as telnet sends them
    c = Conn(srv.port)
    c.s.sendall(b"PING\r\nSET inl ok\r\nGET inl\r\n")
    check([c.reply(), c.reply(), c.reply()] == ["PONG", "OK", "ok"], "inline commands")
    c.close()
    # a client that never reads: its replies pile up to the output limit, then it is closed
    good.cmd("SET", "mb", "m" * (1 << 20))
    c = Conn(srv.port)
    c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    closes = open(srv.log_path).read().count("unsent replies passed")
    c.s.sendall(b"*2\r\n$3\r\nGET\r\n$2\r\nmb\r\n" * 200)  # 200 MB of replies, never read
    deadline = time.time() + 10
    while open(srv.log_path).read().count("unsent replies passed") == closes and time.time() < deadline:
        time.sleep(0.1)
    check(open(srv.log_path).read().count("unsent replies passed") == closes + 1, "a client that never reads is dropped")
    c.close()  # (reading what the kernel still holds through a 4 KiB window would take a minute)
    # thousands of idle connections
    idle = [Conn(srv.port) for _ in range(2000)]
    check(good.cmd("PING") == "PONG", "serving with 2000 idle connections")
    conns_now = int(srv.info("clients")["connected_clients"])
    check(conns_now >= 2000, f"connected_clients {conns_now}")
    for i in idle:
        i.close()
    check(good.cmd("GET", "precious") == "intact", "other clients' data untouched")
    check(srv.p.poll() is None and len(srv.worker_pids()) == WORKERS, "no worker died of bad input")


def test_limits(srv):
    """The query buffer bound (64 MiB by default, redis's is 1 GiB) and
    --maxclients: an endless command is cut off, others are served."""
    good = Conn(srv.port)
    good.cmd("SET", "precious", "intact")
    c = Conn(srv.port)
    c.s.sendall(b"*1\r\n$%d\r\n" % (100 << 20))  # a bulk longer than the bound is refused as announced
    check(err(c.reply(), "ERR Protocol error: invalid bulk length"), "a bulk over the query limit")
    check(c.closed(), "closed after a bulk over the query limit")
    # an endless command: bulks of 1 MiB, each under the bound, never ending
    c = Conn(srv.port)
    c.s.sendall(b"*1000000\r\n$3\r\nSET\r\n")
    arg = b"$%d\r\n%s\r\n" % (1 << 20, b"x" * (1 << 20))
    cut = False
    for i in range(200):
        try:
            c.s.sendall(arg)
        except (ConnectionResetError, BrokenPipeError):
            cut = True
            break
        if i % 16 == 0:
            check(good.cmd("GET", "precious") == "intact", "others served during an endless command")
    check(cut and i < 100, f"an endless command is cut off (after {i} MiB)")
    check("passed the query limit" in open(srv.log_path).read(), "the cut is logged")
    check(good.cmd("GET", "precious") == "intact", "others served after it")
    c.close()
    good.close()
    # --maxclients: past it an error and a close
    small = Server("--maxclients", "3", workers=1)
    try:
        for _ in range(100):  # (the start's connections may still be closing in the server: then again)
            held = [Conn(small.port) for _ in range(3)]
            if all(h.cmd("PING") == "PONG" for h in held):
                break
            for h in held:
                h.close()
            time.sleep(0.05)
        check(all(h.cmd("PING") == "PONG" for h in held), "3 clients served under --maxclients 3")
        extra = Conn(small.port)
        check(err(extra.reply(), "ERR max number of clients reached"), "the 4th is refused")
        check(extra.closed(), "and closed")
        held.pop().close()
        for _ in range(100):  # the close reaches the server
            again = Conn(small.port)
            r = again.cmd("PING")
            again.close()
            if r == "PONG":
                break
            time.sleep(0.05)
        check(r == "PONG", "a place freed is taken again")
        for h in held:
            h.close()
    finally:
        small.stop()


def test_no_daemon():
    r = subprocess.run([KV, "--socket", os.path.join(tmp, "nobody.sock"), "--port", str(free_port())],
                       capture_output=True, text=True, timeout=20)
    check(r.returncode == 1 and "cannot attach" in r.stderr, f"no tcmd: {r.returncode} {r.stderr!r}")


def run_case(fn, uses):
    """fn against a fresh tcmd (and a fresh tcm-kv where uses says so),
    stopped and checked afterwards, with a timeout (SIGALRM)."""
    def expired(_signum, _frame):
        raise Failed(f"still running after {CASE_TIMEOUT} s")
    signal.signal(signal.SIGALRM, expired)
    signal.alarm(CASE_TIMEOUT)
    tcmd = Tcmd() if uses else None
    srv = None
    try:
        srv = Server(binary=KV_TEST if "hooks" in uses else KV) if "srv" in uses else None
        fn(srv, tcmd)
        if srv:
            srv.stop()
        if tcmd:
            ctl("check")
    finally:
        signal.alarm(0)
        if srv and srv.p.poll() is None:
            os.killpg(srv.p.pid, signal.SIGKILL)
            srv.p.wait()
        if tcmd:
            tcmd.stop()


def main():
    results = []
    # name, function, and what it needs of its own: "tcmd", or "srv" (a
    # tcm-kv of WORKERS workers on that tcmd; "srv hooks": tcm-kv-test)
    cases = [
        ("commands", lambda srv, tcmd: test_commands(srv), "srv"),
        ("every worker", lambda srv, tcmd: test_every_worker(srv), "srv"),
        ("expiry", lambda srv, tcmd: test_expiry(srv), "srv"),
        ("eviction", lambda srv, tcmd: test_eviction(), "tcmd"),
        ("bad input", lambda srv, tcmd: test_bad_input(srv), "srv"),
        ("limits", lambda srv, tcmd: test_limits(srv), "srv"),
        ("worker killed under load", lambda srv, tcmd: test_worker_kill(srv), "srv"),
        ("worker killed holding a lock", lambda srv, tcmd: test_kill_holding_lock(srv), "srv hooks"),
        ("worker killed mid-change", lambda srv, tcmd: test_kill_mid_change(), "tcmd"),
        ("tcmd restarted under load", test_tcmd_restart, "srv"),
        ("tcmd gone for good", lambda srv, tcmd: test_tcmd_gone(tcmd), "tcmd"),
        ("no tcmd", lambda srv, tcmd: test_no_daemon(), ""),
    ]
    only = os.environ.get("KV_TEST_ONLY")
    last_log = None
    for seq, (name, fn, uses) in enumerate(cases):
        if only and name != only:
            continue
        fresh_names(seq)
        t0 = time.time()
        try:
            run_case(fn, uses)
            results.append((name, None))
            print(f"ok   {name} ({time.time() - t0:.1f} s)")
        except Exception as e:  # noqa: BLE001 - every case runs; the summary says which failed
            results.append((name, e))
            print(f"FAIL {name}: {e}")
            if not isinstance(e, Failed):
                traceback.print_exc()
            logs = sorted(glob.glob(os.path.join(tmp, "kv-*.log")), key=os.path.getmtime)
            last_log = logs[-1] if logs else None
        sys.stdout.flush()
    failed = [n for n, e in results if e]
    print(f"tcm-kv: {len(results) - len(failed)} passed, {len(failed)} failed")
    if failed and last_log:
        print(f"server log ({last_log}):\n" + open(last_log).read()[-3000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    rc = main()
    if rc == 0:  # its sockets and logs; a failed run's stay for the logs
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"kept: {tmp}", file=sys.stderr)
    sys.exit(rc)
