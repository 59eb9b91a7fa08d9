#!/usr/bin/env python3
"""The README says what tcmd and tcmctl do: its usage blocks are `tcmd
--help` and `tcmctl --help` word for word (tcmctl's lists every command of
`tcmctl --list-commands`, the one table in cli/tcmctl.c), and its settings
table has every setting of `tcmd --list-settings` (the one table in
daemon/config.c), no other, with the same runtime flag and default. Fails
naming each difference."""
import os
import re
import subprocess
import sys

build, source = sys.argv[1], sys.argv[2]
tcmd = os.path.join(build, "tcmd")
readme = open(os.path.join(source, "README.md")).read()
problems = []

def usage_block(program, heading):
    help_text = subprocess.run([program, "--help"], capture_output=True, text=True, check=True).stdout
    block = re.search(heading + r"\n\n```\n(.*?)```", readme, re.S)
    name = os.path.basename(program)
    if not block:
        problems.append(f"README has no usage block under '{heading}'")
    elif block.group(1) != help_text:
        problems.append(f"README's {name} usage block differs from `{name} --help` "
                        f"(paste the output of `{name} --help`)")
    return help_text


usage_block(tcmd, "## Running tcmd")
tcmctl_help = usage_block(os.path.join(build, "tcmctl"), "## tcmctl")
commands = [line.split("\t")[0] for line in
            subprocess.run([os.path.join(build, "tcmctl"), "--list-commands"], capture_output=True, text=True,
                           check=True).stdout.splitlines()]
for name in commands:
    if not re.search(rf"^  {name} ", tcmctl_help, re.M):
        problems.append(f"`tcmctl --help` does not list the command {name}")

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
print(f"readme: {len(listed)} settings, {len(commands)} tcmctl commands and both usage blocks checked; "
      f"{0 if problems else 1} passed, {1 if problems else 0} failed")
sys.exit(1 if problems else 0)
