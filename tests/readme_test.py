#!/usr/bin/env python3
"""The README says what tcmd does: its usage block is `tcmd --help` word for
word, and its settings table has every setting of `tcmd --list-settings`
(the one table in daemon/config.c), no other, with the same runtime flag
and default. Fails naming each difference."""
import os
import re
import subprocess
import sys

build, source = sys.argv[1], sys.argv[2]
tcmd = os.path.join(build, "tcmd")
readme = open(os.path.join(source, "README.md")).read()
problems = []

help_text = subprocess.run([tcmd, "--help"], capture_output=True, text=True, check=True).stdout
block = re.search(r"## Running tcmd\n\n```\n(.*?)```", readme, re.S)
if not block:
    problems.append("README has no usage block under '## Running tcmd'")
elif block.group(1) != help_text:
    problems.append("README's usage block differs from `tcmd --help` (paste the output of `tcmd --help`)")

table = {}
for key, runtime, meaning in re.findall(r"^\| `(\w+)` \| (yes|no) \| (.*) \|$", readme, re.M):
    table[key] = (runtime, meaning)
listed = [line.split("\t")[:3] for line in
          subprocess.run([tcmd, "--list-settings"], capture_output=True, text=True, check=True).stdout.splitlines()]
for name, runtime, default in listed:
    if name not in table:
        problems.append(f"setting {name} is not in the README's table")
        continue
    if table[name][0] != runtime:
        problems.append(f"{name}: README says runtime {table[name][0]}, tcmd {runtime}")
    want = f"default {default}" if default else "default"
    if want not in table[name][1]:
        problems.append(f"{name}: README's row does not say '{want}'")
for name in set(table) - {n for n, _, _ in listed}:
    problems.append(f"README lists {name}, which tcmd does not have")

for p in problems:
    print("FAILED:", p, file=sys.stderr)
print(f"readme: {len(listed)} settings and the usage block checked; "
      f"{0 if problems else 1} passed, {1 if problems else 0} failed")
sys.exit(1 if problems else 0)
