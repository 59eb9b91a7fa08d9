#!/usr/bin/env python3
"""profile_cost.py — what the heap profile's sampling costs: the seed sweep's
46 cases (bench/suite.py's), tcm with profile_sample at its default against
0, alternated in each case, the median of RUNS runs of each; tcm's time on /
off per case and their geometric mean (docs/BENCHMARKS.md, "The heap
profile"). usage: bench/profile_cost.py BUILD_DIR [--quick] [--runs R] [--on "TCMD ARGS"]"""
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
    a = ap.parse_args()
    seed = os.path.join(os.path.abspath(a.build), "bench", "tcm-bench-seed")
    allocs = {"off": ([seed, "--alloc", "tcm"], {"TCM_BENCH_TCMD_ARGS": "--profile-sample 0"}),
              "on": ([seed, "--alloc", "tcm"], {"TCM_BENCH_TCMD_ARGS": a.on})}
    ratios = []
    print("case,off_s,on_s,on/off")
    for case in suite.cases(a.quick):
        times, _ = suite.run_seed_case(allocs, case, a.runs, None)
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        ratios.append(on / off)
        print("%s %s,%.4f,%.4f,%.3f" % (case[0], case[1], off, on, on / off), flush=True)
    gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print("cases %d: on/off median %.3f, geometric mean %.3f, range %.3f-%.3f" %
          (len(ratios), statistics.median(ratios), gm, min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
