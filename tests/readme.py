#!/usr/bin/env python3
"""readme.py: every README code block marked <!-- plain-clone example --> runs (exit 0) with only
what a plain clone and its build have: no ../shared. `build/moestream` in a block is the build's
binary; each block runs in bash with -eu in a scratch directory."""
import os
import re
import subprocess
import sys
import tempfile

src, bindir = sys.argv[1], sys.argv[2]
text = open(os.path.join(src, "README.md"), encoding="utf-8").read()
blocks = re.findall(r"<!-- plain-clone example -->\n```sh\n(.*?)```", text, re.S)
if not blocks:
    sys.exit("readme.py: no block marked <!-- plain-clone example --> in README.md")
failed = 0
for i, b in enumerate(blocks):
    if "../shared" in b:
        print("FAIL block %d points at ../shared" % i)
        failed += 1
        continue
    script = b.replace("build/moestream", os.path.join(bindir, "moestream"))
    with tempfile.TemporaryDirectory(prefix="moestream-readme-") as d:
        r = subprocess.run(["bash", "-euc", script], cwd=d, capture_output=True, text=True, timeout=240,
                           env=dict(os.environ, TMPDIR=d))
    ok = r.returncode == 0
    print("%s block %d (%d lines)%s" % ("ok  " if ok else "FAIL", i, b.count("\n"),
                                         "" if ok else ": exit %d\n%s\n%s" % (r.returncode, r.stdout[-2000:], r.stderr[-2000:])))
    failed += not ok
sys.exit(1 if failed else 0)
