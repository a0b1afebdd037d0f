"""ptyutil.py: what the pseudo-terminal tests (chat_pty.py, run_pty.py) share: counted checks and
reading what the terminal shows."""
import os
import re
import select
import time

failed = 0


def check(ok, what):
    """Print ok / FAIL for one check and count the failures (in failed)."""
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += not ok


def read_until(fd, pattern, limit, buf):
    """Read the terminal into buf[0] (text) until pattern (a regex over everything read
    so far) matches, the program closes it, or limit seconds pass; whether pattern matched."""
    end = time.time() + limit
    while time.time() < end:
        if re.search(pattern, buf[0], re.S):
            return True
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            buf[0] += data.decode("utf-8", errors="replace")
    return bool(re.search(pattern, buf[0], re.S))
