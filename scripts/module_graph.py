#!/usr/bin/env python3
"""module_graph.py [DIR...] — which module calls which, and the cycles.

A module is one .c file of daemon/, client/ or shm/ (by default). An edge
A -> B means A calls a function B defines (its tcm__ / tcm_ names). Prints
the edges, then each group of modules that call one another in a cycle
(strongly connected components). Comments and strings are skipped.
Used for issue 22 ("no include cycles"): the headers follow the modules,
so a cycle here is one between headers' users too.
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
from platform_lint import strip  # noqa: E402

DEF = re.compile(r"^[A-Za-z_][\w \t\*]*?\b(tcm_\w+)\s*\([^;{}]*?\)\s*\{", re.M | re.S)
CALL = re.compile(r"\b(tcm_\w+)\s*\(")


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    dirs = sys.argv[1:] or ["daemon", "client"]
    files = [f for d in dirs for f in sorted((root / d).glob("*.c"))]
    text = {f: strip(f.read_text()) for f in files}
    owner = {}
    for f, t in text.items():
        for m in DEF.finditer(t):
            if not t[:m.start()].rstrip().endswith("static") and "static" not in m.group(0).split("(")[0]:
                owner[m.group(1)] = f
    edges = {f: set() for f in files}
    for f, t in text.items():
        for m in CALL.finditer(t):
            g = owner.get(m.group(1))
            if g and g != f:
                edges[f].add(g)
    name = lambda f: f"{f.parent.name}/{f.name}"
    for f in files:
        if edges[f]:
            print(name(f), "->", " ".join(sorted(name(g) for g in edges[f])))
    # Tarjan's strongly connected components
    index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(name(c) for c in comp))

    sys.setrecursionlimit(10000)
    for f in files:
        if f not in index:
            visit(f)
    print("\ncycles:" if sccs else "\nno cycles")
    for c in sccs:
        print("  " + " <-> ".join(c))


if __name__ == "__main__":
    main()
