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

# tcmctl --json prints these answers keyed by their protobuf field names
# (tcm__json_members): the README's list of each is the .proto's message.
proto = open(os.path.join(source, "proto", "tcm.proto")).read()
json_section = re.search(r"### JSON fields \(stable\)\n(.*?)\n### ", readme, re.S)
if not json_section:
    problems.append("README has no '### JSON fields (stable)' section")
else:
    text = re.sub(r"\([^()]*\)", "", json_section.group(1))  # the remarks in parentheses
    for command, message in [("health", "Health"), ("resize", "Resized"), ("release", "Released"),
                             ("roots", "RootInfo"), ("detach", "Detached"), ("check", "CheckResult")]:
        body = re.search(r"^message " + message + r" \{(.*?)^\}", proto, re.S | re.M)
        fields = set(re.findall(r"^\s*(?:repeated )?\w+ (\w+) = \d+;", body.group(1), re.M))
        said = re.search(r"`" + command + r"`: (.*?)(?:\.\s|\n- |$)", text, re.S)
        in_readme = set(re.findall(r"`(\w+)`", said.group(1))) if said else set()
        if in_readme != fields:
            problems.append(f"README's JSON fields of {command} ({', '.join(sorted(in_readme))}) are not those of "
                            f"message {message} ({', '.join(sorted(fields))})")

for p in problems:
    print("FAILED:", p, file=sys.stderr)
print(f"readme: {len(listed)} settings, {len(commands)} tcmctl commands, both usage blocks and the JSON "
      f"fields of six answers checked; "
      f"{0 if problems else 1} passed, {1 if problems else 0} failed")
sys.exit(1 if problems else 0)
