#!/usr/bin/env python3
"""profile_cost.py — what the heap profile's sampling costs: the seed sweep's
46 cases (bench/suite.py's), tcm with profile_sample at its default against
0, alternated in each case, the median of RUNS runs of each; tcm's time on /
off per case and their geometric mean (docs/BENCHMARKS.md, "The heap
profile"). With --versus OTHER_BUILD: both builds with sampling on, OTHER's time over
BUILD's per case and their geometric mean (a change to the sampling path, A/B).
usage: bench/profile_cost.py BUILD_DIR [--quick] [--runs R] [--on "TCMD ARGS"] [--versus OTHER_BUILD]"""
import argparse
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--quick", action="store_true", help="a tenth of the pairs")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--on", default="", help="tcmd's arguments for sampling on (default: none, its defaults)")
    ap.add_argument("--versus", help="another build: its time with sampling on over BUILD's")
    a = ap.parse_args()

    def seed(build):
        return [os.path.join(os.path.abspath(build), "bench", "tcm-bench-seed"), "--alloc", "tcm"]
    on = {"TCM_BENCH_TCMD_ARGS": a.on}
    if a.versus:
        allocs, base, other = {"build": (seed(a.build), on), "versus": (seed(a.versus), on)}, "build", "versus"
    else:
        allocs, base, other = {"off": (seed(a.build), {"TCM_BENCH_TCMD_ARGS": "--profile-sample 0"}),
                               "on": (seed(a.build), on)}, "off", "on"
    ratios = []
    print("case,%s_s,%s_s,%s/%s" % (base, other, other, base))
    for case in suite.cases(a.quick):
        times, _ = suite.run_seed_case(allocs, case, a.runs, None)
        b, o = statistics.median(times[base]), statistics.median(times[other])
        ratios.append(o / b)
        print("%s %s,%.4f,%.4f,%.3f" % (case[0], case[1], b, o, o / b), flush=True)
    gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print("cases %d: %s/%s median %.3f, geometric mean %.3f, range %.3f-%.3f" %
          (len(ratios), other, base, statistics.median(ratios), gm, min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
