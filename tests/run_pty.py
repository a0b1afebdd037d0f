#!/usr/bin/env python3
"""run_pty.py: `moestream run` streaming to a pseudo-terminal whose output is stopped (Ctrl-S) when
Ctrl-C comes, so the signal lands inside a write of the answer. It must exit 130 with its one
"interrupted" message: no "cannot write to standard output" (the write returned EINTR before the
handler restarted it). The model is the sparse `small` synthetic checkpoint, whose answers run to -n.
usage: run_pty.py MOESTREAM"""
import os
import pty
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptyutil import check, read_until  # noqa: E402
import ptyutil  # noqa: E402

ms = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="moestream-run-pty-")


try:
    model = os.path.join(tmp, "small")
    subprocess.run([ms, "synth", "--out", model, "--preset", "small", "--sparse"], check=True, capture_output=True)
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(ms, [ms, "run", "--model", model, "--prompt", "Hello", "-n", "20000", "--quiet"])
    buf = [""]
    read_until(fd, r"(?!)", 2.0, buf)  # the answer streams
    os.write(fd, b"\x13")  # Ctrl-S: the terminal stops its output; the next write of the answer waits
    read_until(fd, r"(?!)", 1.0, buf)
    os.write(fd, b"\x03")  # Ctrl-C lands inside that write
    read_until(fd, r"(?!)", 0.5, buf)
    os.write(fd, b"\x11")  # Ctrl-Q: the output goes on
    status, end = None, time.time() + 60
    while status is None and time.time() < end:
        p, st = os.waitpid(pid, os.WNOHANG)
        if p:
            status = st
        read_until(fd, r"(?!)", 0.2, buf)
    if status is None:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
    check(code == 130, "Ctrl-C while the terminal's output is stopped: exit 130 (%s)" % code)
    check("interrupted" in buf[0], "the message says the run was interrupted")
    check("cannot write" not in buf[0], "and nothing about standard output")
    if ptyutil.failed:
        print("--- the terminal showed (the end):\n" + buf[0][-1500:])
finally:
    shutil.rmtree(tmp, ignore_errors=True)
sys.exit(1 if ptyutil.failed else 0)
