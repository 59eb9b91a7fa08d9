#!/usr/bin/env python3
"""The hand-written man pages against the binaries: tcm(3)'s EXAMPLE is a
program that builds and runs (taken from the page as a user copies it,
built against this tree's libtcm and run against a private tcmd; it must
print every item its workers made and leave nothing held), and tcm-kv(1)
names every option `tcm-kv --help` has, and no other."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "common"))
from tcmtest import Tcmd, wait_until  # noqa: E402

build, source = sys.argv[1], os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
kv_help = subprocess.run([os.path.join(build, "examples", "tcm-kv"), "--help"], capture_output=True, text=True)
kv_options = set(re.findall(r"--[a-z][a-z-]+", kv_help.stdout + kv_help.stderr)) - {"--help"}
kv_page = open(os.path.join(source, "packaging", "man", "tcm-kv.1")).read().replace("\\-", "-")
kv_documented = set(re.findall(r"--[a-z][a-z-]+", kv_page))
if kv_options != kv_documented:
    sys.exit(f"man: tcm-kv(1) names {sorted(kv_documented - kv_options)} that tcm-kv lacks, lacks "
             f"{sorted(kv_options - kv_documented)}")
page = open(os.path.join(source, "packaging", "man", "tcm.3")).read()
example = re.search(r"\.SH EXAMPLE\n.*?\.nf\n(.*?)\.fi\n", page, re.S)
if not example:
    sys.exit("man: tcm(3) has no EXAMPLE program")
code = example.group(1).replace("\\-", "-").replace("\\e", "\\")
work = tempfile.mkdtemp(prefix="tcm-man-")
src, exe = os.path.join(work, "example.c"), os.path.join(work, "example")
with open(src, "w") as f:
    f.write(code)
subprocess.run(["cc", "-Wall", "-Werror", "-o", exe, src, "-I", os.path.join(source, "client", "include"),
                "-L", build, "-ltcm", f"-Wl,-rpath,{build}"], check=True)
d = Tcmd(build, "man")
try:
    r = subprocess.run([exe], capture_output=True, text=True, timeout=60, env=dict(os.environ, TCM_SOCKET=d.sock))
    items = [line for line in r.stdout.splitlines() if re.fullmatch(r"item \d+ of worker \d", line)]
    ok = r.returncode == 0 and len(items) == 64
    def stats():
        return subprocess.run([d.tcmctl, "--socket", d.sock, "--json", "stats"], capture_output=True,
                              text=True).stdout
    ok = ok and wait_until(lambda: '"clients_attached":0' in stats())  # (the workers' reclaim included)
    ok = ok and '"bytes_orphaned":0' in stats()  # everything the workers made was freed
finally:
    clean = d.stop()
    shutil.rmtree(work, ignore_errors=True)
print(f"man: tcm(3)'s example: exit {r.returncode}, {len(items)} of 64 items, {'ok' if ok else 'FAILED'}; "
      f"{r.stderr.strip()}")
sys.exit(0 if ok and clean else 1)
