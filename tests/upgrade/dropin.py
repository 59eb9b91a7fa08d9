# dropin.py — a program under the drop-in (libtcm-malloc.so, shared heap)
# for tests/upgrade_test.sh: it rewrites a dict of byte strings and makes a
# large block every round until DIR/stop exists, writing DIR/py.rounds,
# then checks every value. Exit 0, or 3 when a value is not what was written.
import os
import sys
import time

d = sys.argv[1]
keep = {}
rounds = 0


def progress():
    with open(d + "/py.rounds.tmp", "w") as f:
        f.write("%d\n" % rounds)
    os.rename(d + "/py.rounds.tmp", d + "/py.rounds")


while not os.path.exists(d + "/stop"):
    for i in range(2000):
        k = (rounds * 2000 + i) % 5000
        keep[k] = bytes([k % 251]) * (16 + k % 3000)
    big = bytearray(300000)
    big[-1] = 1
    rounds += 1
    if rounds % 20 == 0:
        progress()
    time.sleep(0.001)
for k, v in keep.items():
    if v != bytes([k % 251]) * (16 + k % 3000):
        print("value %d differs" % k)
        sys.exit(3)
progress()
print("py: %d rounds, %d values checked" % (rounds, len(keep)))
