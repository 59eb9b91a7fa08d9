#!/usr/bin/env python3
"""The control plane end to end: every tcmctl command against a real tcmd,
--json output parsed and checked against a known workload driven through a
real client (tcm_test_helper serve), config changes seen by that client,
resize enforced, release measured, /metrics read with curl, other users
refused for changes, SIGHUP reloading the config file. Each case has a tcmd
of its own (tcmtest.Tcmd), so none depends on what an earlier one set."""
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "common"))
from tcmtest import Helper, Tally, count_in_file, free_port, wait_until  # noqa: E402

build = sys.argv[1]
TCMD = os.path.join(build, "tcmd")
TCMCTL = os.path.join(build, "tcmctl")
CONFIG = "# tcmd settings\nlog_level = info\npage_cache_cap = 64M\n"
sock = None  # the socket of the current case's tcmd
tmp = None  # and its directory

tally = Tally()
check = tally.check


@contextlib.contextmanager
def case(name, args=()):
    """One case against a fresh tcmd (stopped and checked at its end)."""
    global sock, tmp
    with tally.case(build, name, prefix="ctl", args=args, config=CONFIG) as d:
        sock, tmp = d.sock, d.dir
        yield d


def ctl(*args, expect=0, user=None):
    cmd = [TCMCTL, "--socket", sock, *args]
    if user:
        cmd = ["runuser", "-u", user, "--", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    check(r.returncode == expect, f"tcmctl {' '.join(args)} exited {r.returncode}, wanted {expect}: {r.stderr}")
    return r


def js(*args):
    return json.loads(ctl("--json", *args).stdout)



def Client():  # noqa: N802 - reads as the class it returns
    """A real client of the current case's tcmd (tcm_test_helper serve)."""
    return Helper(build, sock)


def client_row(pid):
    rows = [c for c in js("clients") if c["pid"] == pid]
    check(len(rows) == 1, f"client {pid} listed once")
    return rows[0]


def class_row(size):
    return [c for c in js("classes") if c["size"] == size][0]


def cached_client():
    """A client that allocated 1000 x 1000 B and freed them: they sit in its
    caches. Returns it and what tcmd says it caches."""
    c = Client()
    check(c.do("alloc 1000 1000") == "ok", "allocate 1000 x 1000 B")
    check(c.do("free") == "ok", "free them")
    cached = client_row(c.pid)["bytes_cached"]
    check(cached >= 512 * 1024, f"freed objects sit in the client's caches ({cached})")
    return c, cached


with case("ping, health") as d:
    check(js("ping")["daemon_pid"] == d.pid, "ping names the daemon")
    h = js("health")
    check(h["ok"] and h["heap_thread_ok"], "health ok")

with case("a known workload moves in-use, cached and per-class figures"):
    c = Client()
    base_stats = js("stats")
    check(c.do("alloc 1000 1000") == "ok", "allocate 1000 x 1000 B")
    row = client_row(c.pid)
    check(row["bytes_held"] >= 1000 * 1024, f"held {row['bytes_held']} >= 1000 objects of class 1024")
    cls = class_row(1024)
    check(cls["objects_in_use"] >= 1000, f"class 1024 in use {cls['objects_in_use']}")
    check(cls["batches_out"] > 0, "refills counted")
    st = js("stats")
    check(st["bytes_in_use"] - base_stats["bytes_in_use"] >= 1000 * 1024, "stats bytes_in_use moved")
    check(st["requests_refill"] > base_stats["requests_refill"], "refills counted in stats")
    check(sum(b["count"] for b in st["service_time"]["buckets"]) >= st["requests"], "histogram counts requests")
    check(c.do("root ctl.test") == "ok", "root set")
    check(any(r["name"] == "ctl.test" for r in js("roots")), "roots lists ctl.test")
    check(c.do('root we"ird\\name') == "ok", "root with a quote and a backslash")
    check(any(r["name"] == 'we"ird\\name' for r in js("roots")), "--json escapes root names")
    err = json.loads(ctl("--json", "config", "set", "tcache_budget", 'x"y', expect=1).stdout)
    check('x"y' in err["error"]["message"], "--json error messages are valid JSON")
    check(c.do("free") == "ok", "free them")
    row = client_row(c.pid)
    cached_before = row["bytes_cached"]
    check(cached_before >= 512 * 1024, f"freed objects sit in the client's caches ({cached_before})")
    check(row["bytes_held"] >= row["bytes_cached"], "cached bytes are held")
    check(js("stats")["bytes_in_use"] <= base_stats["bytes_in_use"] + 64 * 1024, "in use back down")
    c.close()

with case("a config change is picked up by the running client: smaller budgets make it give memory back"):
    c, cached_before = cached_client()
    check(js("config", "set", "tcache_budget", "256K")["tcache_budget"]["value"] == str(256 * 1024), "set budget")
    js("config", "set", "xfer_budget", "0")
    check(c.do("poke") == "ok", "client slow path")
    row = client_row(c.pid)
    # the budget, plus the one or two objects per class the poke itself cached
    check(row["bytes_cached"] <= (256 + 320) * 1024 and row["bytes_cached"] < cached_before / 2,
          f"client shrank its caches to the budget ({cached_before} -> {row['bytes_cached']})")
    check(js("config", "get", "tcache_budget")["tcache_budget"]["runtime"], "tcache_budget is a runtime setting")
    r = ctl("config", "set", "no_such_key", "1", expect=1)
    check("unknown setting" in r.stderr, "unknown key refused clearly")
    r = ctl("config", "set", "tcache_budget", "lots", expect=1)
    check("bad value" in r.stderr, "bad value refused clearly")
    r = ctl("config", "set", "heap_size", "2G", expect=1)
    check("when tcmd starts" in r.stderr, "startup-only key refused at runtime")
    c.close()

with case("heap_nice: the heap thread runs at a higher priority, changed at runtime, bad values refused") as d:
    def heap_thread_nice():
        # the thread named tcm-heap (field 19 of stat is nice; a sanitizer adds threads of its own)
        task = f"/proc/{d.pid}/task"
        tids = [t for t in os.listdir(task) if open(f"{task}/{t}/comm").read().strip() == "tcm-heap"]
        return [int(open(f"{task}/{t}/stat").read().rsplit(")", 1)[1].split()[16]) for t in tids]
    main_nice = int(open(f"/proc/{d.pid}/stat").read().rsplit(")", 1)[1].split()[16])
    check(js("config", "get", "heap_nice")["heap_nice"]["value"] == "-10", "default -10")
    if os.geteuid() == 0:
        check(heap_thread_nice() == [-10] and main_nice == 0, f"heap thread at nice -10, the main thread at 0 "
              f"({heap_thread_nice()}, {main_nice})")
        js("config", "set", "heap_nice", "-3")
        check(heap_thread_nice() == [-3], f"set at runtime: {heap_thread_nice()}")
    r = ctl("config", "set", "heap_nice", "25", expect=1)
    check("-20 to 19" in r.stderr, f"out of range refused clearly: {r.stderr.strip()}")
    r = ctl("config", "set", "heap_nice", "-", expect=1)
    check("bad value" in r.stderr, "not a number refused")
    check(js("config", "get", "heap_nice")["heap_nice"]["value"] == ("-3" if os.geteuid() == 0 else "-10"),
          "a refused value leaves the setting as it was")

with case("resize: refused below what is in use; ENOMEM under the limit; raising works at once"):
    c = Client()
    check(c.do("alloc 20 1000000") == "ok", "20 page runs")
    r = ctl("resize", "8M", expect=1)
    check("in use" in r.stderr, "resize below in-use refused with a message")
    check(c.do("free") == "ok", "free page runs")
    check(js("resize", "64M")["new_limit"] == 64 << 20, "resize down to 64M")
    ans = c.do("alloc 100 1000000")
    check(ans.startswith("enomem"), f"ENOMEM under a 64M limit ({ans})")
    check(c.do("free") == "ok", "free again")
    check(js("resize", "1G")["new_limit"] == 1 << 30, "resize back up")
    check(c.do("alloc 100 1000000") == "ok", "100 MB fit again after raising the limit")
    check(c.do("free") == "ok", "free")
    check(c.do("shutdown") == "ok", "client detaches")
    c.close()

with case("the loop answers while the heap thread's work waits: ping during a release") as d:
    # a stopped client never acknowledges the flush release asks for, so
    # the release waits its 200 ms for it; ping and stats need not wait
    stopped = Client()
    check(stopped.do("alloc 100 100") == "ok" and stopped.do("free") == "ok", "a client with a cache")
    js("config", "set", "log_level", "debug")  # for the line that says tcmd has read the release
    os.kill(stopped.pid, signal.SIGSTOP)
    try:
        t0 = time.time()
        rel = subprocess.Popen([TCMCTL, "--socket", sock, "release"], stdout=subprocess.PIPE, text=True)
        check(wait_until(lambda: count_in_file(d.log, "release: flush asked of 1 attached") == 1),
              "tcmd logs that the release asked the one client and waits")
        ctl("ping")
        ping_done = time.time() - t0
        check(rel.poll() is None, f"ping answered ({ping_done * 1000:.0f} ms) while the release still waited")
        check(rel.wait(timeout=30) == 0 and time.time() - t0 >= 0.2, "the release finished after its wait")
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    stopped.close()

with case("release: the segment's blocks fall under 5% of their peak"):
    c = Client()
    check(c.do("alloc 100 1000000") == "ok", "100 page runs")
    peak = js("stats")["bytes_committed"]
    check(c.do("free") == "ok", "free")
    check(c.do("shutdown") == "ok", "client detaches")
    rel = js("release")
    check(rel["committed_after"] * 20 < peak, f"after release {rel['committed_after']} < 5% of peak {peak}")
    check(js("stats")["bytes_released"] >= rel["released_bytes"], "released counted")
    c.close()

with case("detach: the client is cut off, its allocations fail"):
    c = Client()
    check(c.do("alloc 1 100") == "ok", "client attaches")
    cid = client_row(c.pid)["client_id"]
    check(js("detach", str(cid))["pid"] == c.pid, "detach")
    ans = c.do("alloc 10000 5000")
    check(ans.startswith("enomem"), f"detached client cannot allocate ({ans})")
    ctl("detach", "999999", expect=1)
    c.close()

port = free_port()
with case("metrics over HTTP", args=("--metrics-port", str(port))):
    ctl("quota", "set", "12345:worker", "64M")
    m = subprocess.run(["curl", "-sf", f"http://127.0.0.1:{port}/metrics"], capture_output=True, text=True,
                       timeout=10)
    check(m.returncode == 0, "curl /metrics")
    body = m.stdout
    for name in ("tcm_reserved_bytes", 'tcm_requests_total{op="refill"}', "tcm_request_duration_seconds_bucket",
                 "tcm_released_bytes_total", "tcm_build_info"):
        check(name in body, f"/metrics has {name}")
    check("# TYPE tcm_requests_total counter" in body, "counter type")
    check('tcm_quota_limit_bytes{uid="12345",name="worker"} 67108864' in body, "a quota's limit")
    check("tcm_last_recovery_seconds " in body, "a figure in microseconds is in seconds")
    lint = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=30)
    check(lint.returncode == 0, f"promtool check metrics: {lint.stdout}{lint.stderr}")
    check("# TYPE tcm_quota_refused_total counter" in body, "a quota's refusals")
    nf = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{port}/x"],
                        capture_output=True, text=True, timeout=10)
    check(nf.stdout == "404", "other paths 404")

if os.geteuid() != 0 or subprocess.run(["which", "runuser"], capture_output=True).returncode != 0:
    print("SKIP: other users may read but not change (needs root and runuser to act as nobody)")
else:
    with case("other users may read but not change"):
        os.chmod(tmp, 0o755)
        os.chmod(sock, 0o777)
        ctl("stats", user="nobody")
        r = ctl("config", "set", "log_level", "debug", user="nobody", expect=1)
        check("permission denied" in r.stderr, "non-owner refused for config set")
        ctl("release", user="nobody", expect=1)
        ctl("resize", "512M", user="nobody", expect=1)
        ctl("quota", "set", "nobody", "1G", user="nobody", expect=1)
        ctl("quota", user="nobody")
        os.chmod(sock, 0o700)

with case("SIGHUP reloads the config file") as d:
    with open(d.conf, "w") as f:
        f.write("log_level = debug\npage_cache_cap = 32M\n")
    d.p.send_signal(signal.SIGHUP)
    check(wait_until(lambda: js("config", "get", "page_cache_cap")["page_cache_cap"]["value"] == str(32 << 20)),
          "SIGHUP reload")
    check(js("config", "get", "log_level")["log_level"]["value"] == "debug", "log level reloaded")

with case("a tcmd that cannot start in the background says why on the terminal") as d:
    port = free_port()
    first = subprocess.run([TCMD, "--socket", os.path.join(d.dir, "a.sock"), "--name", d.name + "a",
                            "--metrics-port", str(port)], capture_output=True, text=True, timeout=30)
    check(first.returncode == 0 and "started (pid" in first.stdout, f"the first starts ({first.stderr})")
    second = subprocess.run([TCMD, "--socket", os.path.join(d.dir, "b.sock"), "--name", d.name + "b",
                             "--metrics-port", str(port)], capture_output=True, text=True, timeout=30)
    check(second.returncode == 1 and "address already in use" in second.stderr
          and "failed to start; the log:" in second.stderr, f"the second says why ({second.stderr.strip()})")
    os.kill(int(first.stdout.split("pid ")[1].split(")")[0]), signal.SIGTERM)

with case("config keys with hyphens are the same keys; resize names a bad size"):
    check(js("config", "set", "decay-ms", "5000") == js("config", "get", "decay_ms"), "set decay-ms echoes decay_ms")
    check("decay_ms" in js("config", "get", "decay-ms"), "get decay-ms")
    r = ctl("resize", "1X", expect=2)
    check("'1X' is not a size" in r.stderr, "resize says the size is bad")

with case("--watch redraws; usage errors are 2; no daemon is 3"):
    w = ctl("stats", "--watch", "0.1", "--count", "2")
    check(w.stdout.count("# Heap") == 2, "two snapshots")
    check("/s " in w.stdout.split("# Heap")[2], "the second has the counters' rates")
    ctl("frobnicate", expect=2)
    ctl("resize", "lots", expect=2)
    r = subprocess.run([TCMCTL, "--socket", os.path.join(tmp, "nope.sock"), "ping"], capture_output=True, text=True)
    check(r.returncode == 3, "cannot connect is 3")
    check(ctl("config", "--help").stdout.startswith("usage:"), "per-command help")

with case("max_clients: the record table is a setting, and an adopted heap keeps its own",
          args=("--max-clients", "16", "--clients-per-uid", "16")) as d:
    held = [Client() for _ in range(16)]
    for c in held:
        check(c.do("alloc 1 100") == "ok", "each of 16 attaches")
    extra = subprocess.run([os.path.join(build, "tests", "tcm_test_helper"), "serve"], input="exit\n",
                           capture_output=True, text=True, timeout=30, env=dict(os.environ, TCM_SOCKET=sock))
    check(extra.returncode != 0 and "-24" in extra.stderr, f"the 17th gets EMFILE ({extra.stderr.strip()})")
    for c in held:
        c.close()
    check(wait_until(lambda: js("stats")["clients_attached"] == 0), "all gone")
    extra = Client()
    check(extra.do("alloc 1 100") == "ok", "a record is free again")
    extra.close()

with case("quota: set, listed, cleared; bad input refused"):
    q = js("quota", "set", "12345:worker", "64M")
    check(q["quotas"][0] == {"uid": 12345, "name": "worker", "limit": 64 << 20, "rule": True, "bytes_held": 0,
                             "refused": 0}, f"the rule ({q})")
    js("quota", "set", "12345", "1G")
    check(wait_until(lambda: len(js("quota")["quotas"]) == 2), "two rules")
    check("worker" in ctl("quota").stdout, "the table names it")
    js("quota", "clear", "12345:worker")
    check(wait_until(lambda: [r["name"] for r in js("quota")["quotas"] if r["rule"]] == [""]), "one left")
    ctl("quota", "clear", "12345:worker", expect=1)
    ctl("quota", "set", "12345", "lots", expect=2)
    ctl("quota", "set", "no-such-user-here", "1G", expect=2)
    ctl("quota", "set", "12345:a-name-too-long-for-comm", "1G", expect=1)
    js("quota", "clear", "12345")

with case("the whole-heap validator: consistent, and its JSON"):
    c = js("check")
    check(c["ok"] is True and "pages below top" in c["message"], "check: consistent")

print(f"control: {tally.checks - tally.failures} of {tally.checks} checks passed, {tally.failures} failed")
sys.exit(1 if tally.failures else 0)
