#!/usr/bin/env python3
"""suite.py — the seed's 46-case sweep and the hit path, tcm against glibc
(default and with trimming pinned), jemalloc, tcmalloc and mimalloc.

Driven by bench/run_suite.sh, which builds the binaries first. Subcommands:

  run     run the sweep, the hit path and the callgrind counts; write CSV
  report  turn the CSV into markdown tables and PNG plots

Method (docs/BENCHMARKS.md): each case runs 5 rounds; in every round each
allocator runs once in its own process (tcm-bench-seed[-X] --runs 1), the
order reversed every other round, so slow drifts of the machine hit every
allocator alike. Median, min and max of the 5 times are reported; the ratio
is T(other) / T(tcm) of the medians (> 1: tcm faster). All rounds of one
case hold /tmp/tcm-bench.lock (flock(2), the same lock as `flock(1)`), so
no two timed runs on this box overlap. The CPU time the rest of the box used
while a case ran is recorded; a case where others used more than 10% is run
again once at the end.
"""
import argparse
import csv
import fcntl
import os
import statistics
import subprocess
import sys
import time

LOCK = "/tmp/tcm-bench.lock"
# Pinned glibc: no trimming of the heap top, no mmap for big blocks (the
# tunable's maximum, 32 MiB), so glibc keeps its memory like the others do.
GLIBC_PINNED = "glibc.malloc.trim_threshold=1073741824:glibc.malloc.mmap_threshold=33554432"
COMPETITORS = ["jemalloc", "tcmalloc", "mimalloc"]
FOUR = ["glibc", "jemalloc", "tcmalloc", "mimalloc"]  # "the four" of the brief
SWEEP_THREADS = 2  # = CPUs here; the seed used 24 threads on 24 CPUs

K, M = 1000, 1000000


def cases(quick):
    """(sweep, x, size, threads, batch, pairs per thread). The seed's shape:
    17 sizes, 9 thread counts, 9 batches, 5 pair counts, 6 mixed cases."""
    out = []
    t = SWEEP_THREADS
    for i in range(17):  # 4 B .. 256 KiB, batch 64
        size = 4 << i
        # glibc (default) is ~0.3 Mpairs/s from 4 KiB up: it trims the
        # heap after every batch; the pairs keep its run at ~8 s.
        pairs = 6 * M if size <= 512 else (3 * M if size <= 2048 else 1200 * K)
        out.append(("size", size, size, t, 64, pairs))
    for th in (1, 2, 4, 8, 16, 24, 32, 64, 100):  # 64 B, batch 256
        out.append(("threads", th, 64, th, 256, 1 * M))  # the seed's 1M
    for b in (1, 4, 16, 32, 64, 128, 256, 1024, 2048):  # 64 B
        out.append(("batch", b, 64, t, b, 12 * M))
    for p in (100 * K, 300 * K, 1 * M, 3 * M, 10 * M):  # 64 B, batch 256; the seed's range
        out.append(("pairs", p, 64, t, 256, p))
    mixed = [  # size, threads, batch, pairs
        (16384, t, 32, 1200 * K),  # the seed's 16 KiB x batch 32 (12.5x there)
        (16384, t, 64, 1200 * K),  # ... and its reversal, batch 64 (0.07x there)
        (256, 4, 512, 6 * M),
        (1024, 8, 128, 1500 * K),
        (4096, t, 1024, 600 * K),  # 4 MiB held per thread
        (32, 16, 2048, 1500 * K),
    ]
    for s, th, b, p in mixed:
        out.append(("mixed", "%s/%dt/b%d" % (fmt_size(s), th, b), s, th, b, p))
    if quick:
        out = [c[:5] + (max(c[5] // 10, 10000) if c[0] != "pairs" else c[5] // 10,) for c in out]
    return out


def fmt_size(n):
    for unit, sh in (("M", 20), ("K", 10)):
        if n >= 1 << sh and n % (1 << sh) == 0:
            return "%d%s" % (n >> sh, unit)
    return str(n)


def fmt_count(n):
    if n >= M and n % M == 0:
        return "%dM" % (n // M)
    if n >= K and n % K == 0:
        return "%dK" % (n // K)
    return str(n)


def allocators(bindir, prefix):
    """label -> (argv prefix, extra env). A competitor without its binary is
    left out (not installed when the tree was configured)."""
    base = os.path.join(bindir, prefix)
    a = {
        "tcm": ([base, "--alloc", "tcm"], {}),
        "glibc": ([base, "--alloc", "glibc"], {}),
        "glibc-pinned": ([base, "--alloc", "glibc"], {"GLIBC_TUNABLES": GLIBC_PINNED}),
    }
    for c in COMPETITORS:
        b = "%s-%s" % (base, c)
        if os.access(b, os.X_OK):
            a[c] = ([b, "--alloc", c], {})
    return a


def jiffies_box():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v) - v[3] - v[4]  # all but idle and iowait


def jiffies_own():
    t = os.times()
    return (t.user + t.system + t.children_user + t.children_system) * os.sysconf("SC_CLK_TCK")


class Lock:
    """flock(2) on /tmp/tcm-bench.lock, like `flock /tmp/tcm-bench.lock CMD`."""

    def __enter__(self):
        self.f = open(LOCK, "a")
        t = time.time()
        fcntl.flock(self.f, fcntl.LOCK_EX)
        self.waited = time.time() - t
        self.box0, self.own0, self.t0 = jiffies_box(), jiffies_own(), time.time()
        return self

    def others_pct(self):
        """CPU the rest of the box used since the lock was taken, in % of all CPUs."""
        others = (jiffies_box() - self.box0) - (jiffies_own() - self.own0)
        wall = (time.time() - self.t0) * os.sysconf("SC_CLK_TCK") * os.cpu_count()
        return max(0.0, 100.0 * others / wall) if wall > 0 else 0.0

    def __exit__(self, *exc):
        self.f.close()


def run_cmd(argv, env_extra, log):
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    env.update(env_extra)
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if log:
        log.write(p.stderr)
    if p.returncode != 0:
        sys.stderr.write("FAILED (%d): %s\n%s" % (p.returncode, " ".join(argv), p.stderr[-2000:]))
        sys.exit(1)
    return p.stdout


def run_seed_case(allocs, case, runs, log):
    sweep, x, size, threads, batch, pairs = case
    names = list(allocs)
    times = {n: [] for n in names}
    with Lock() as lk:
        for r in range(runs):
            for n in names if r % 2 == 0 else reversed(names):
                argv, env = allocs[n]
                out = run_cmd(argv + ["--size", str(size), "--threads", str(threads), "--batch", str(batch),
                                      "--pairs", str(pairs), "--runs", "1", "--csv", "--timeout", "300"],
                              env, log)
                times[n].append(float(out.strip().split(",")[5]))
        others = lk.others_pct()
    return times, others


def cmd_run(a):
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "stderr.log"), "a")
    allocs = allocators(a.bindir, "tcm-bench-seed")
    runs = a.runs
    raw_path = os.path.join(a.out, "seed-raw.csv")
    results = {}
    if "sweep" in a.parts:
        todo = cases(a.quick)
        if a.only:
            todo = [c for c in todo if c[0] in a.only.split(",")]
        t_start = time.time()
        for i, c in enumerate(todo):
            times, others = run_seed_case(allocs, c, runs, log)
            results[c] = (times, others)
            sys.stderr.write("[%3.0fs] %2d/%d %-7s %-12s others %4.1f%%  tcm %.4fs glibc %.4fs\n" % (
                time.time() - t_start, i + 1, len(todo), c[0], c[1], others,
                statistics.median(times["tcm"]), statistics.median(times["glibc"])))
        # a case disturbed by other work on the box: once more, keep the quieter
        for c in todo:
            if results[c][1] > 10:
                times, others = run_seed_case(allocs, c, runs, log)
                sys.stderr.write("rerun %s %s: others %.1f%% -> %.1f%%\n" % (c[0], c[1], results[c][1], others))
                if others < results[c][1]:
                    results[c] = (times, others)
        with open(raw_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["sweep", "x", "size", "threads", "batch", "pairs", "allocator", "run", "seconds", "others_pct"])
            for c, (times, others) in results.items():
                for n, ts in times.items():
                    for r, t in enumerate(ts):
                        w.writerow(list(c) + [n, r + 1, "%.6f" % t, "%.1f" % others])
    if "hitpath" in a.parts:
        run_hitpath(a, log)
    if "callgrind" in a.parts:
        run_callgrind(a, log)


def run_hitpath(a, log):
    rows, others = hitpath_once(a, log)
    if others > 10:  # disturbed by other work: once more, keep the quieter
        rows2, others2 = hitpath_once(a, log)
        sys.stderr.write("rerun hitpath: others %.1f%% -> %.1f%%\n" % (others, others2))
        if others2 < others:
            rows, others = rows2, others2
    with open(os.path.join(a.out, "hitpath-raw.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["allocator", "size", "pairs", "run", "ns_per_pair", "others_pct"])
        for row in rows:
            w.writerow(row + ["%.1f" % others])


def hitpath_once(a, log):
    allocs = allocators(a.bindir, "tcm-bench-hitpath")
    pairs = 2 * M if a.quick else 20 * M
    sizes = "16,64,256,4096"
    rows = []
    with Lock() as lk:
        for r in range(a.runs):
            names = list(allocs)
            for n in names if r % 2 == 0 else reversed(names):
                argv, env = allocs[n]
                out = run_cmd(argv + ["--sizes", sizes, "--pairs", str(pairs), "--runs", "1", "--csv"], env, log)
                for line in out.split():
                    f = line.split(",")
                    rows.append([n, f[1], f[2], r + 1, f[3]])
        others = lk.others_pct()
    sys.stderr.write("hitpath: others %.1f%%\n" % others)
    return rows, others


def callgrind_total(argv, env, log):
    env2 = dict(os.environ)
    env2.pop("GLIBC_TUNABLES", None)
    env2.update(env)
    p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"] + argv, env=env2,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        log.write(p.stderr)
        return None, p.stderr
    for line in p.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split(":")[1]), p.stderr
    return None, p.stderr


def run_callgrind(a, log):
    allocs = allocators(a.bindir, "tcm-bench-hitpath")
    allocs.pop("glibc-pinned", None)  # tunables do not touch the hit path
    pairs = 50 * K if a.quick else 200 * K
    rows = []
    with Lock():
        for n, (argv, env) in allocs.items():
            for size in (16, 64, 256, 4096):
                base = argv + ["--sizes", str(size), "--runs", "1", "--csv"]
                i0, err0 = callgrind_total(base + ["--pairs", "0"], env, log)
                i1, err1 = callgrind_total(base + ["--pairs", str(pairs)], env, log)
                if i0 is None or i1 is None:
                    sys.stderr.write("callgrind failed for %s %d:\n%s\n" % (n, size, (err1 or err0)[-1500:]))
                    continue
                rows.append([n, size, pairs, i0, i1, "%.1f" % ((i1 - i0) / pairs)])
                sys.stderr.write("callgrind %s %d: %.1f instructions/pair\n" % (n, size, (i1 - i0) / pairs))
    with open(os.path.join(a.out, "callgrind.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["allocator", "size", "pairs", "instr_baseline", "instr_run", "instr_per_pair"])
        w.writerows(rows)


# ---- report -----------------------------------------------------------------

def load_seed(path):
    data = {}  # (sweep, x, size, threads, batch, pairs) -> alloc -> [times]
    others = {}
    order = []
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (row["sweep"], row["x"], int(row["size"]), int(row["threads"]), int(row["batch"]),
                   int(row["pairs"]))
            if key not in data:
                data[key] = {}
                order.append(key)
            data[key].setdefault(row["allocator"], []).append(float(row["seconds"]))
            others[key] = float(row["others_pct"])
    return order, data, others


def ratio_fmt(r):
    s = "%.2f" % r if r < 100 else "%.0f" % r
    return "**%s**" % s if r < 1 else s


def cmd_report(a):
    order, data, others = load_seed(os.path.join(a.out, "seed-raw.csv"))
    names = [n for n in ["tcm", "glibc", "glibc-pinned"] + COMPETITORS if any(n in d for d in data.values())]
    others_names = [n for n in names if n != "tcm"]
    four = [n for n in FOUR if n in names]
    med = {k: {n: statistics.median(v) for n, v in d.items()} for k, d in data.items()}
    summary_rows = []
    out = []
    p = out.append
    sweeps = []
    for k in order:
        if k[0] not in sweeps:
            sweeps.append(k[0])
    titles = {
        "size": "Object size (%d threads, batch 64)" % SWEEP_THREADS,
        "threads": "Threads (64 B, batch 256)",
        "batch": "Batch (64 B, %d threads)" % SWEEP_THREADS,
        "pairs": "Pairs per thread (64 B, %d threads, batch 256)" % SWEEP_THREADS,
        "mixed": "Mixed cases (size/threads/batch)",
    }
    # the combined CSV: one line per case and allocator
    with open(os.path.join(a.out, "seed.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sweep", "x", "size", "threads", "batch", "pairs", "allocator", "median_s", "min_s", "max_s",
                    "mpairs_per_s", "ratio_vs_tcm", "others_pct"])
        for k in order:
            for n in names:
                ts = data[k].get(n)
                if not ts:
                    continue
                m = statistics.median(ts)
                w.writerow(list(k) + [n, "%.6f" % m, "%.6f" % min(ts), "%.6f" % max(ts),
                                      "%.3f" % (k[3] * k[5] / m / 1e6), "%.3f" % (m / med[k]["tcm"]),
                                      "%.1f" % others[k]])
    for sw in sweeps:
        keys = [k for k in order if k[0] == sw]
        p("### %s\n" % titles.get(sw, sw))
        p("Mpairs/s, all threads together (median of %d; min-max of the time in seed.csv):\n" %
          len(data[keys[0]]["tcm"]))
        hdr = "| %s | pairs/thread | " % ("case" if sw == "mixed" else sw) + " | ".join(names) + " |"
        p(hdr)
        p("|---:" * (len(names) + 2) + "|")
        for k in keys:
            x = k[1] if sw == "mixed" else (fmt_size(int(k[1])) if sw == "size" else fmt_count(int(k[1])))
            cells = []
            for n in names:
                m = med[k].get(n)
                cells.append("%.1f" % (k[3] * k[5] / m / 1e6) if m else "-")
            p("| %s | %s | %s |" % (x, fmt_count(k[5]), " | ".join(cells)))
        p("")
        p("Speedup of tcm, T(other) / T(tcm) (> 1: tcm faster; **bold**: tcm slower):\n")
        p("| %s | " % ("case" if sw == "mixed" else sw) + " | ".join("vs " + n for n in others_names) +
          " | vs best of the four | others' CPU |")
        p("|---:" * (len(others_names) + 3) + "|")
        for k in keys:
            x = k[1] if sw == "mixed" else (fmt_size(int(k[1])) if sw == "size" else fmt_count(int(k[1])))
            t = med[k]["tcm"]
            rs = [med[k][n] / t if n in med[k] else float("nan") for n in others_names]
            best = min(med[k][n] for n in four) / t
            bestname = min(four, key=lambda n: med[k][n])
            p("| %s | %s | %s (%s) | %.0f%% |" % (x, " | ".join(ratio_fmt(r) for r in rs), ratio_fmt(best),
                                                 bestname, others[k]))
            summary_rows.append((k, {n: med[k][n] / t for n in others_names}, best, bestname))
        p("")
        if a.plots:
            p("![%s](%s)\n" % (titles.get(sw, sw), os.path.relpath(os.path.join(a.out, "sweep-%s.png" % sw),
                                                                    a.linkbase)))
    # summary
    s = []
    q = s.append
    n_cases = len(summary_rows)
    q("| | value |")
    q("|---|---:|")
    q("| cases | %d |" % n_cases)
    for n in others_names:
        beats = sum(1 for _, r, _, _ in summary_rows if r.get(n, 0) > 1)
        q("| cases tcm beats %s | %d of %d |" % (n, beats, n_cases))
    bests = [b for _, _, b, _ in summary_rows]
    q("| cases tcm beats the best of the four | %d of %d |" % (sum(1 for b in bests if b > 1), n_cases))
    q("| median case, T(best of the four) / T(tcm) | %.2f |" % statistics.median(bests))
    for n in others_names:
        q("| median case, T(%s) / T(tcm) | %.2f |" % (n, statistics.median(r[n] for _, r, _, _ in summary_rows)))
    q("| largest case share of others' CPU | %.0f%% |" % max(others.values()))
    losses = [(k, r, b, bn) for k, r, b, bn in summary_rows if r.get("glibc", 2) < 1 or b < 1]
    s.append("")
    if losses:
        q("Cases where tcm loses to glibc or to the best of the four:\n")
        q("| sweep | case | vs glibc | vs glibc-pinned | vs best (who) |")
        q("|---|---|---:|---:|---:|")
        for k, r, b, bn in losses:
            x = k[1] if k[0] == "mixed" else (fmt_size(int(k[1])) if k[0] == "size" else fmt_count(int(k[1])))
            q("| %s | %s | %s | %s | %s (%s) |" % (k[0], x, ratio_fmt(r["glibc"]),
                                                 ratio_fmt(r.get("glibc-pinned", float("nan"))), ratio_fmt(b), bn))
        q("")
    hit = hitpath_md(a)
    text = "## Seed sweep: summary\n\n" + "\n".join(s) + "\n" + "\n".join(out) + "\n" + hit
    with open(os.path.join(a.out, "suite.md"), "w") as f:
        f.write(text)
    print(text)
    if a.plots:
        plots(a, order, med, names, sweeps, titles)


def hitpath_md(a):
    out = []
    p = out.append
    path = os.path.join(a.out, "hitpath-raw.csv")
    if not os.path.exists(path):
        return ""
    ns = {}
    with open(path) as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        ns.setdefault((row["allocator"], int(row["size"])), []).append(float(row["ns_per_pair"]))
    names = [n for n in ["tcm", "glibc", "glibc-pinned"] + COMPETITORS if any(k[0] == n for k in ns)]
    sizes = sorted({k[1] for k in ns})
    cg = {}
    cgpath = os.path.join(a.out, "callgrind.csv")
    if os.path.exists(cgpath):
        with open(cgpath) as f:
            for row in csv.DictReader(f):
                cg[(row["allocator"], int(row["size"]))] = float(row["instr_per_pair"])
    p("## Hit path: one malloc + free pair in a tight loop, one thread\n")
    p("ns per pair, median of %d runs of %s pairs (min-max); instructions per pair from callgrind "
      "(%s):\n" % (len(next(iter(ns.values()))), fmt_count(int(rows[0]["pairs"])),
                   "others' CPU during the timed runs %s%%" % rows[0]["others_pct"]))
    p("| size | " + " | ".join(names) + " | T(tcm) / T(fastest of the four), < 1: tcm faster |")
    p("|---:" * (len(names) + 2) + "|")
    summary = []
    for s in sizes:
        cells = []
        for n in names:
            v = ns.get((n, s))
            if not v:
                cells.append("-")
                continue
            c = " (%.0f-%.0f)" % (min(v), max(v)) if False else ""
            ins = cg.get((n, s))
            cells.append("%.2f ns%s%s" % (statistics.median(v), c, " / %.0f instr" % ins if ins is not None else ""))
        four = [n for n in FOUR if (n, s) in ns]
        fastest = min(four, key=lambda n: statistics.median(ns[(n, s)]))
        r = statistics.median(ns[("tcm", s)]) / statistics.median(ns[(fastest, s)])
        summary.append(r)
        p("| %s | %s | %.2f (%s) |" % (fmt_size(s), " | ".join(cells), r, fastest))
    p("")
    p("Spread (min-max ns over the runs):\n")
    p("| size | " + " | ".join(names) + " |")
    p("|---:" * (len(names) + 1) + "|")
    for s in sizes:
        p("| %s | %s |" % (fmt_size(s), " | ".join("%.2f-%.2f" % (min(ns[(n, s)]), max(ns[(n, s)]))
                                                  if (n, s) in ns else "-" for n in names)))
    p("")
    if a.plots:
        p("![hit path](%s)\n" % os.path.relpath(os.path.join(a.out, "hitpath.png"), a.linkbase))
        hitpath_plot(a, ns, names, sizes, cg)
    return "\n".join(out) + "\n"


COLORS = {"glibc": "tab:blue", "glibc-pinned": "tab:cyan", "jemalloc": "tab:green", "tcmalloc": "tab:red",
          "mimalloc": "tab:purple", "tcm": "black"}


def plots(a, order, med, names, sweeps, titles):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for sw in sweeps:
        keys = [k for k in order if k[0] == sw]
        fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
        if sw == "mixed":
            xs = list(range(len(keys)))
            labels = [k[1] for k in keys]
        else:
            xs = [int(k[1]) for k in keys]
            labels = [fmt_size(x) if sw == "size" else fmt_count(x) for x in xs]
        for n in names:
            if n == "tcm":
                continue
            ys = [med[k][n] / med[k]["tcm"] for k in keys]
            ax.plot(xs, ys, marker="o", ms=4, label="vs " + n, color=COLORS.get(n),
                    linestyle="--" if n == "glibc-pinned" else "-")
        ax.axhline(1.0, color="black", lw=1)
        ax.set_yscale("log")
        if sw != "mixed":
            ax.set_xscale("log", base=2 if sw != "pairs" else 10)
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=45 if len(xs) > 9 else 0, fontsize=8)
        ax.minorticks_off()
        ax.set_ylabel("speedup of tcm: T(other) / T(tcm)")
        ax.set_title(titles.get(sw, sw), fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "sweep-%s.png" % sw))
        plt.close(fig)


def hitpath_plot(a, ns, names, sizes, cg):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 3.8), dpi=110)
    w = 0.8 / len(names)
    for i, n in enumerate(names):
        ys = [statistics.median(ns[(n, s)]) if (n, s) in ns else 0 for s in sizes]
        ax.bar([j + i * w for j in range(len(sizes))], ys, w, label=n, color=COLORS.get(n))
    ax.set_xticks([j + 0.4 - w / 2 for j in range(len(sizes))])
    ax.set_xticklabels([fmt_size(s) + " B" if s < 1024 else fmt_size(s) for s in sizes])
    ax.set_ylabel("ns per malloc+free pair")
    ax.set_title("Hit path, one thread (lower is better)", fontsize=10)
    ax.legend(fontsize=8, ncol=3)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "hitpath.png"))
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--bindir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--quick", action="store_true")
    r.add_argument("--runs", type=int, default=5)
    r.add_argument("--parts", default="sweep,hitpath,callgrind")
    r.add_argument("--only", help="sweeps to run, e.g. size,mixed")
    g = sub.add_parser("report")
    g.add_argument("--out", required=True)
    g.add_argument("--no-plots", dest="plots", action="store_false")
    g.add_argument("--linkbase", default=None, help="directory the markdown links are relative to")
    a = ap.parse_args()
    if a.cmd == "run":
        a.parts = a.parts.split(",")
        cmd_run(a)
    else:
        a.linkbase = a.linkbase or a.out
        cmd_report(a)


if __name__ == "__main__":
    main()
