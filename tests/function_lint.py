#!/usr/bin/env python3
"""function_lint.py SOURCE_DIR — no function over ~100 lines in daemon/, client/ and shm/.

A function longer than that holds more than one job: split it into steps
with names (issue 22). The limit counts the lines from the opening brace of
a function body to its closing one. Comments and string literals are
skipped when braces are matched (platform_lint.strip). Files another change
still has to split are listed in WAIVED with their current longest function,
so the check stops them from growing and fails on any new long function.
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from platform_lint import strip  # noqa: E402

CHECKED = ["daemon", "client", "shm"]
LIMIT = 100
# function name -> lines it may keep until it is split (none: keep it empty)
WAIVED = {}

# a function definition: a name and its parameter list at the start of a
# line (after the return type), then the opening brace on that line or the next
DEF = re.compile(r"^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(([^;{}]*?)\)\s*(?:__attribute__\s*\(\(.*?\)\)\s*)*\{",
                 re.M | re.S)


def functions(text):
    """(name, first line, lines) of each function body in text (stripped)."""
    for m in DEF.finditer(text):
        name = m.group(1)
        if name in ("if", "for", "while", "switch", "return", "sizeof"):
            continue
        depth, i = 0, m.end() - 1
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        first = text.count("\n", 0, m.end() - 1) + 1
        last = text.count("\n", 0, i) + 1
        yield name, first, last - first + 1


def main():
    root = pathlib.Path(sys.argv[1])
    problems = []
    for d in CHECKED:
        for f in sorted((root / d).rglob("*")):
            if f.suffix not in (".c", ".h"):
                continue
            for name, line, n in functions(strip(f.read_text())):
                if n > max(LIMIT, WAIVED.get(name, 0)):
                    problems.append(f"{f.relative_to(root)}:{line}: {name} is {n} lines (limit {LIMIT})")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} function(s) over {LIMIT} lines: split them into named steps")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
