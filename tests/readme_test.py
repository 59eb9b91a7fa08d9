#!/usr/bin/env python3
"""The README says what tcmd and tcmctl do: its usage blocks are `tcmd
--help` and `tcmctl --help` word for word (tcmctl's lists every command of
`tcmctl --list-commands`, the one table in cli/tcmctl.c), and its settings
table has every setting of `tcmd --list-settings` (the one table in
daemon/config.c), no other, with the same runtime flag and no restated
default (the usage block, which is `tcmd --help`, gives each one), and
its list of JSON fields is what `tcmctl --json` prints, command by
command, against a private tcmd with a client attached. Fails naming each
difference."""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "common"))
from tcmtest import Helper, Tcmd  # noqa: E402

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


tcmd_help = usage_block(tcmd, "## Running tcmd")
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
    # the default's one home is the setting's help (the usage block above,
    # checked word for word against `tcmd --help`, and tcmd(8)): a row that
    # restated it would drift
    if re.search(r"\(default\b|\bdefault:? " + re.escape(default or "-") + r"\b", table[name][1]):
        problems.append(f"{name}: README's row restates the default; the setting's help is its home")
    opt = re.search(rf"^  --{name.replace('_', '-')} .*$", tcmd_help, re.M)
    if not opt or (default and f"default {default}" not in opt.group(0)):
        problems.append(f"{name}: `tcmd --help` does not give --{name.replace('_', '-')}'s default {default}")
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



def parse_shape(s, i=0):
    """A shape as the README writes one, `{a, b:[{c, d}]}`, as
    {"a": None, "b": [{"c": None, "d": None}]}; returns it and the index
    past it."""
    if s[i] == "[":
        inner, i = parse_shape(s, i + 1)
        return [inner], i + 1
    shape, i = {}, i + 1
    while s[i] != "}":
        m = re.match(r"\s*(\w+)\s*", s[i:])
        name, i = m.group(1), i + m.end()
        shape[name] = None
        if s[i] == ":":
            i += 1 + len(s[i + 1:]) - len(s[i + 1:].lstrip())
            shape[name], i = parse_shape(s, i)
        while s[i] in ", ":
            i += 1
    return shape, i + 1


def readme_shapes(section):
    """command -> the shape of its --json answer the README's JSON section
    gives: `a`, `b` are keys, a `{...}` after a key is that key's shape,
    "array of" a list of such rows, `x_<y>` (p, q) the keys x_p and x_q;
    other remarks in parentheses are prose."""
    text = re.sub(r"`(\w+)_<\w+>`\s*\(([^()]*)\)",
                  lambda m: ", ".join(f"`{m.group(1)}_{w.strip()}`" for w in m.group(2).split(",")), section)
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", "", text)
    parts = re.split(r"(?:^- |\s)`([a-z][a-z-]*(?: --[a-z]+)?)(?: [a-z]+)?`(?:/`[a-z]+`)?: ", text, flags=re.M)
    shapes = {}
    for command, said in zip(parts[1::2], parts[2::2]):
        row = {}
        key = None
        for span in re.findall(r"`([^`]+)`", said):
            if span.startswith("{") and key:
                row[key] = parse_shape(span)[0]
            elif span.startswith("{"):
                row = parse_shape(span)[0]
            else:
                key, row[span] = span, None
        shapes[command] = [row] if said.lstrip().startswith("array of") else row
    return shapes


def compare(where, shape, got):
    """Differences between a shape from the README and an answer; KEY in
    a shape stands for any key (config's settings)."""
    if isinstance(shape, list):
        if not isinstance(got, list) or not got:
            problems.append(f"{where}: README says a non-empty array, tcmctl printed {json.dumps(got)[:80]}")
            return
        for row in got:
            compare(where + "[]", shape[0], row)
        return
    if not isinstance(got, dict):
        problems.append(f"{where}: README lists keys, tcmctl printed {json.dumps(got)[:80]}")
        return
    if list(shape) == ["KEY"]:
        for k, v in got.items():
            compare(f"{where}.{k}", shape["KEY"], v)
        return
    for k in sorted(set(shape) - set(got)):
        problems.append(f"{where}: README lists `{k}`, which `tcmctl --json` does not print")
    for k in sorted(set(got) - set(shape)):
        problems.append(f"{where}: `tcmctl --json` prints `{k}`, which the README does not list")
    for k in set(shape) & set(got):
        if shape[k] is not None:
            compare(f"{where}.{k}", shape[k], got[k])


def check_json_against_tcmd(shapes):
    """Every answer the README describes, printed by a real tcmd (a private
    one) with a client attached and a root set, against its shape. Returns
    how many answers were compared."""
    d = Tcmd(build, prefix="readme")
    client = Helper(build, d.sock)
    try:
        def js(*args):
            r = subprocess.run([d.tcmctl, "--socket", d.sock, "--json", *args], capture_output=True, text=True,
                               timeout=30)
            if r.returncode:
                problems.append(f"tcmctl --json {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
            return json.loads(r.stdout) if r.stdout else None
        if client.do("alloc 10 1000") != "ok" or client.do("root readme.root") != "ok":
            problems.append("the helper client could not allocate and set a root")
        leaver = Helper(build, d.sock)  # leaves what it allocated: a departed holder
        leaver.do("alloc 10 1000")
        leaver.close()
        for _ in range(100):
            if (js("clients", "--dead") or {}).get("holders"):
                break
            time.sleep(0.05)
        cid = js("clients")[0]["client_id"]
        answers = {"ping": js("ping"), "health": js("health"), "stats": js("stats"), "clients": js("clients"),
                   "clients --dead": js("clients", "--dead"),
                   "classes": js("classes"), "config": js("config", "get"), "roots": js("roots"),
                   "resize": js("resize", "1G"), "release": js("release"), "check": js("check"),
                   "detach": js("detach", str(cid)), "quota": js("quota", "set", "12345:worker", "1G")}
        js("config", "set", "profile_sample", "1")  # every allocation from here on is sampled
        sampled = Helper(build, d.sock)  # (the first one was detached)
        if sampled.do("alloc 10 1000") != "ok":
            problems.append("a helper client could not allocate")
        answers["heap-profile --top"] = js("heap-profile", "--top", "5")
        sampled.close()
        set_answer = js("config", "set", "spin_us", "10")
        if set(answers["config"]) != {n for n, _, _ in listed} or list(set_answer or {}) != ["spin_us"]:
            problems.append("config get does not print every setting by name, or config set not the one it set")
        compare("config set", shapes.get("config", {}), set_answer)
        for command in sorted(set(shapes) | set(answers)):
            if command not in shapes:
                problems.append(f"README's JSON fields do not describe `{command}`")
            elif command not in answers:
                problems.append(f"readme_test does not run `{command}`, which the README describes")
            else:
                compare(command, shapes[command], answers[command])
    finally:
        client.p.kill()
        client.p.wait()
        if not d.stop():
            problems.append(f"the readme test's tcmd did not stop cleanly: {d.log_tail()}")
    return len(answers) + 1


answers_checked = check_json_against_tcmd(readme_shapes(json_section.group(1))) if json_section else 0

problems = list(dict.fromkeys(problems))  # (once, not once per row of an array)
for p in problems:
    print("FAILED:", p, file=sys.stderr)
print(f"readme: {len(listed)} settings, {len(commands)} tcmctl commands, both usage blocks, the JSON "
      f"fields of six answers against the .proto and of {answers_checked} against a running tcmd checked; "
      f"{0 if problems else 1} passed, {1 if problems else 0} failed")
sys.exit(1 if problems else 0)
