#!/usr/bin/env python3
"""install.py: `cmake --install BUILD --prefix TMP` puts every file where it belongs, the installed
programs run, the man pages render, and the installed systemd units point at the installed programs."""
import os
import shutil
import subprocess
import sys
import tempfile

build = sys.argv[1]
prefix = tempfile.mkdtemp(prefix="moestream-install-")
failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok


try:
    r = subprocess.run(["cmake", "--install", build, "--prefix", prefix], capture_output=True, text=True)
    check(r.returncode == 0, "cmake --install exits 0: " + r.stderr.strip()[-300:])
    want = ["bin/moestream", "bin/moestream-worker", "share/man/man1/moestream.1", "share/man/man1/moestream-worker.1",
            "lib/systemd/system/moestream-serve.service", "lib/systemd/system/moestream-worker@.service",
            "share/doc/moestream/LICENSE", "share/doc/moestream/README.md", "share/doc/moestream/docs/API.md",
            "share/doc/moestream/examples/serve.env.example", "share/doc/moestream/examples/worker.env.example"]
    for w in want:
        check(os.path.isfile(os.path.join(prefix, w)), "installed " + w)
    for prog in ("moestream", "moestream-worker"):
        p = subprocess.run([os.path.join(prefix, "bin", prog), "--version"], capture_output=True, text=True)
        check(p.returncode == 0 and p.stdout.startswith(prog + " "), "the installed %s runs: %s" % (prog, p.stdout.strip()))
    unit = open(os.path.join(prefix, "lib/systemd/system/moestream-serve.service")).read()
    check("exec %s/bin/moestream serve" % prefix in unit and "/usr/local/bin" not in unit,
          "the installed serve unit runs the installed program")
    page = open(os.path.join(prefix, "share/man/man1/moestream.1")).read()
    check(page.startswith(".TH MOESTREAM 1") and ".SH COMMAND SERVE" in page and "--max-batch" in page,
          "moestream.1 holds every command's --help")
    if shutil.which("man"):
        m = subprocess.run(["man", "-l", os.path.join(prefix, "share/man/man1/moestream-worker.1")], capture_output=True,
                           text=True, env=dict(os.environ, MANPAGER="cat", PAGER="cat", MANWIDTH="100"))
        check(m.returncode == 0 and "--listen ENDPOINT" in m.stdout, "man renders moestream-worker.1")
    else:
        print("SKIP: man is not installed: the pages are not rendered")
finally:
    shutil.rmtree(prefix, ignore_errors=True)
sys.exit(1 if failed else 0)
