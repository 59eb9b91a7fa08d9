#!/usr/bin/env python3
"""ab.py — tcm before and after a change: the seed's 46 cases (bench/suite.py's
list) run with tcm-bench-seed of two build trees, alternating A and B within
each round and swapping who goes first every round, so that the machine's
drifts hit both alike. Prints, per case, the median time of each and B/A;
and the geometric mean of B/A over the cases (< 1: B is faster).

  bench/ab.py A_BUILD B_BUILD [--rounds 5] [--only size,batch] [--quick]

Each tree's tcm-bench-seed starts its own tcmd (BUILD/tcmd). Holds
/tmp/tcm-bench.lock per case like suite.py.
"""
import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402


def one(bindir, case, log):
    _, _, size, threads, batch, pairs = case
    argv = [os.path.join(bindir, "bench", "tcm-bench-seed"), "--alloc", "tcm", "--size", str(size), "--threads",
            str(threads), "--batch", str(batch), "--pairs", str(pairs), "--runs", "1", "--csv", "--timeout", "300"]
    out = suite.run_cmd(argv, {}, log)
    return float(out.strip().split(",")[5])  # seconds, as suite.py reads it


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--only", help="sweeps, e.g. size,mixed")
    p.add_argument("--quick", action="store_true", help="a tenth of the pairs")
    a = p.parse_args()
    cases = suite.cases(a.quick)
    if a.only:
        cases = [c for c in cases if c[0] in a.only.split(",")]
    log = open(os.devnull, "w")
    ratios = []
    print("%-8s %8s %12s %12s %7s" % ("sweep", "x", "A median s", "B median s", "B/A"))
    for case in cases:
        ta, tb = [], []
        with suite.Lock():
            for r in range(a.rounds):
                order = [(a.a, ta), (a.b, tb)] if r % 2 == 0 else [(a.b, tb), (a.a, ta)]
                for bindir, times in order:
                    times.append(one(bindir, case, log))
        ma, mb = statistics.median(ta), statistics.median(tb)
        ratios.append(mb / ma)
        print("%-8s %8s %12.4f %12.4f %7.3f" % (case[0], case[1], ma, mb, mb / ma), flush=True)
    g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    print("geometric mean B/A over %d cases: %.3f (min %.3f, max %.3f)" % (len(ratios), g, min(ratios),
                                                                           max(ratios)))


if __name__ == "__main__":
    main()
