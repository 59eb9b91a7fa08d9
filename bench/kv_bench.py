#!/usr/bin/env python3
"""tcm-kv under redis-benchmark, against the same server on other heaps and
against redis-server, in one run (bench/run_kv.sh builds and calls this).

Servers: tcm-kv on tcm (worker processes); the same code on
Boost.Interprocess managed_shared_memory (tcm-kv-peers, KV_HEAP=boost,
worker processes); tcm-kv-peers as threads of one process on glibc malloc
and on jemalloc (KV_HEAP=libc, LD_PRELOAD); redis-server --save '' --appendonly no. For each: requests/s,
p50 and p99 of SET, GET, INCR and MSET at -P 1 and -P 16, values of 16, 100,
1024 and 16384 bytes, keys drawn from a million (-r), 50 connections; the
median of RUNS runs. Memory: a fresh server loaded with N keys of 100 bytes
(redis-benchmark SET -r N until DBSIZE is near N), the growth of shm
committed (tcm: tcmd's bytes_committed; Boost: the segment's touched pages)
plus the growth of private RSS of every process of the server, per key.

usage: kv_bench.py BUILD_DIR OUT_MD [--quick]
env: KV_BENCH_SERVERS=tcm,redis (a subset), KV_BENCH_SIZES=100,16384"""
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "common"))
from tcmtest import free_port  # noqa: E402

build, out_md = sys.argv[1], sys.argv[2]
quick = "--quick" in sys.argv
RUNS = 1 if quick else 3
TESTS = ["set", "get", "incr", "mset"]
SIZES = [int(x) for x in os.environ.get("KV_BENCH_SIZES", "100" if quick else "16,100,1024,16384").split(",")]
ONLY = os.environ.get("KV_BENCH_SERVERS")  # e.g. "tcm,redis": only those
PIPES = [1, 16]
KEYS = 1_000_000
MEM_KEYS = 100_000 if quick else 1_000_000
WORKERS = 2
KV = os.path.join(build, "examples", "tcm-kv")
KV_PEERS = os.path.join(build, "examples", "tcm-kv-peers")  # tcm.h's calls on another heap
TCMD = os.path.join(build, "tcmd")
TCMCTL = os.path.join(build, "tcmctl")
tmp = tempfile.mkdtemp(prefix="tcm-kv-bench-")
SOCK = os.path.join(tmp, "tcmd.sock")
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"



def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          timeout=120).stdout.strip()


def wait_ping(port):
    for _ in range(400):
        if cli(port, "PING") == "PONG":
            return
        time.sleep(0.05)
    raise SystemExit(f"server on {port} did not start")


def status_kb(pid, field):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree(pid):
    pids = [pid]
    for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split():
        pids += tree(int(p))
    return pids


class Server:
    def __init__(self, name, argv, env=None, shm=None, tcmd=None):
        self.name, self.port = name, free_port()
        argv = [a.replace("PORT", str(self.port)) for a in argv]
        self.tcmd = tcmd
        self.p = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        self.shm = shm
        wait_ping(self.port)

    def memory(self):
        """Private RSS of the server's processes (and tcmd's), plus its shared memory."""
        pids = tree(self.p.pid) + ([self.tcmd.pid] if self.tcmd else [])
        private = sum(status_kb(p, "RssAnon") for p in pids)
        if self.shm == "tcm":
            st = json.loads(subprocess.run([TCMCTL, "--socket", SOCK, "--json", "stats"], capture_output=True,
                                           text=True).stdout)
            shared = st["bytes_committed"]
        elif self.shm == "boost":
            shared = max(status_kb(p, "RssShmem") for p in pids)  # the segment's pages the workers touched
        else:
            shared = 0
        return private + shared

    def stop(self):
        os.killpg(self.p.pid, signal.SIGTERM)
        try:
            self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()


def bench(port, test, size, pipe):
    n = 200_000 if pipe > 1 else 50_000
    n = max(5_000, min(n, (256 << 20) // max(size, 100)))  # at most ~256 MB of values
    if quick:
        n //= 5
    if test == "mset":
        n //= 4
    r = subprocess.run(["redis-benchmark", "-p", str(port), "-t", test, "-n", str(n), "-r", str(KEYS), "-c",
                        "50", "-P", str(pipe), "-d", str(size), "--csv"], capture_output=True, text=True,
                       timeout=600)
    rows = [line.replace('"', "").split(",") for line in r.stdout.splitlines() if line.startswith('"')]
    for row in rows:
        if row[0] != "test":
            return float(row[1]), float(row[4]), float(row[6])  # rps, p50, p99
    raise SystemExit(f"redis-benchmark {test} on {port}: {r.stdout} {r.stderr}")


def memory_per_key(server):
    cli(server.port, "FLUSHALL")
    time.sleep(0.5)
    empty = server.memory()
    # random keys: load until DBSIZE is close to MEM_KEYS
    subprocess.run(["redis-benchmark", "-p", str(server.port), "-t", "set", "-n", str(MEM_KEYS * 3), "-r",
                    str(MEM_KEYS), "-d", "100", "-P", "16", "-c", "50", "-q"], capture_output=True, timeout=900)
    keys = int(cli(server.port, "DBSIZE"))
    time.sleep(0.5)
    full = server.memory()
    return keys, (full - empty) / keys


def servers():
    """(name, start function) for every server compared."""
    def tcm():
        t = subprocess.Popen([TCMD, "--socket", SOCK, "--name", "kvbench%d" % os.getpid(), "--foreground",
                              "--heap-size", "8G"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if subprocess.run([TCMCTL, "--socket", SOCK, "ping"], capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        s = Server("tcm-kv on tcm, 2 processes", [KV, "--socket", SOCK, "--port", "PORT", "--workers",
                                                   str(WORKERS)], shm="tcm", tcmd=t)
        stop = s.stop

        def stop_both():
            stop()
            t.terminate()
            t.wait()
        s.stop = stop_both
        return s

    yield "tcm", tcm
    yield "boost", lambda: Server("tcm-kv on Boost.Interprocess, 2 processes",
                                  [KV_PEERS, "--port", "PORT", "--workers", str(WORKERS)],
                                  env={"KV_HEAP": "boost", "KV_BOOST_SIZE": "8G"}, shm="boost")
    yield "glibc", lambda: Server("tcm-kv on glibc, 2 threads",
                                  [KV_PEERS, "--threads", "--port", "PORT", "--workers", str(WORKERS)],
                                  env={"KV_HEAP": "libc"})
    if os.path.exists(JEMALLOC):
        yield "jemalloc", lambda: Server("tcm-kv on jemalloc, 2 threads",
                                         [KV_PEERS, "--threads", "--port", "PORT", "--workers",
                                          str(WORKERS)], env={"KV_HEAP": "libc", "LD_PRELOAD": JEMALLOC})
    yield "redis", lambda: Server("redis-server 7 (--save '' --appendonly no)",
                                  ["redis-server", "--port", "PORT", "--save", "", "--appendonly", "no"])


def main():
    results, names, mem = {}, {}, {}
    for key, start in servers():
        if ONLY and key not in ONLY.split(","):
            continue
        s = start()
        names[key] = s.name
        try:
            mem[key] = memory_per_key(s)
            for size in SIZES:
                cli(s.port, "FLUSHALL")
                for pipe in PIPES:
                    for test in TESTS:
                        runs = [bench(s.port, test, size, pipe) for _ in range(RUNS)]
                        results[(key, test, size, pipe)] = tuple(statistics.median(r[i] for r in runs)
                                                                 for i in range(3))
                        print(f"{key:9} {test:5} -d {size:5} -P {pipe:2}: "
                              f"{results[(key, test, size, pipe)][0]:10.0f} req/s", flush=True)
        finally:
            s.stop()
    keys = list(names)
    lines = ["# tcm-kv under redis-benchmark", "",
             f"`bench/run_kv.sh{' --quick' if quick else ''}`: {WORKERS} workers each, redis-benchmark -c 50 "
             f"-r {KEYS}, median of {RUNS} run(s), client on the same 2-CPU box.", "",
             "Servers: " + "; ".join(f"**{k}** = {names[k]}" for k in keys), ""]
    for pipe in PIPES:
        lines += [f"## -P {pipe}: requests/s (p50 / p99 ms), and tcm-kv on tcm against each", "",
                  "| test | -d | " + " | ".join(keys) + " | tcm / " + " | tcm / ".join(k for k in keys if k != "tcm")
                  + " |", "|---|---:|" + "---:|" * (2 * len(keys) - 1)]
        for size in SIZES:
            for test in TESTS:
                row = [results[(k, test, size, pipe)] for k in keys]
                tcm = results[("tcm", test, size, pipe)][0]
                lines.append(f"| {test} | {size} | " + " | ".join(f"{r[0]:,.0f} ({r[1]:.2f} / {r[2]:.2f})"
                                                               for r in row) + " | " +
                             " | ".join(f"{tcm / results[(k, test, size, pipe)][0]:.2f}x" for k in keys
                                        if k != "tcm") + " |")
        lines.append("")
    lines += ["## Memory per key (100-byte values)", "", "| server | keys | bytes per key | vs redis-server |",
              "|---|---:|---:|---:|"]
    for k in keys:
        n, per = mem[k]
        ref = mem.get("redis", mem[k])[1]
        lines.append(f"| {k} | {n:,} | {per:.0f} | {per / ref:.2f}x |")
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(out_md) or ".", exist_ok=True)
    open(out_md, "w").write(text)
    print(text)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
