#!/usr/bin/env python3
"""gen-man.py: man pages (roff) from the programs' own --help, so that they never disagree.

usage: gen-man.py BIN_DIR OUT_DIR VERSION
Writes OUT_DIR/moestream.1 (the command list, then every command's --help) and
OUT_DIR/moestream-worker.1.
"""
import os
import re
import subprocess
import sys


def commands(top):
    """The command names of `moestream --help`'s "commands:" list."""
    names, inside = [], False
    for line in top.split("\n"):
        if line.strip() == "commands:":
            inside = True
        elif inside and not line.strip():
            break
        elif inside:
            m = re.match(r"  ([a-z][a-z-]*)\s", line)
            if m:
                names.append(m.group(1))
    if not names:
        sys.exit("gen-man.py: no command list in moestream --help")
    return names


def help_of(argv):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if r.returncode != 0:
        sys.exit("gen-man.py: %s exited %d: %s" % (" ".join(argv), r.returncode, r.stderr.decode(errors="replace")))
    return r.stdout.decode("utf-8", errors="replace")


def roff(text):
    """Preformatted text: backslashes doubled, lines that start with . or ' protected."""
    out = []
    for line in text.rstrip("\n").split("\n"):
        line = line.replace("\\", "\\e")
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def page(name, version, summary, sections):
    s = ['.TH %s 1 "" "moestream %s" "User Commands"' % (name.upper(), version),
         ".SH NAME", "%s \\- %s" % (name, summary)]
    for title, body in sections:
        s += [".SH " + title, ".nf", roff(body), ".fi"]
    s += [".SH SEE ALSO", "The README and docs/ of the moestream sources (docs/API.md for serve's HTTP API)."]
    return "\n".join(s) + "\n"


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    bin_dir, out_dir, version = sys.argv[1:]
    os.makedirs(out_dir, exist_ok=True)
    ms = os.path.join(bin_dir, "moestream")
    top = help_of([ms, "--help"])
    sections = [("SYNOPSIS", top)]
    for c in commands(top):
        sections.append(("COMMAND " + c.upper(), help_of([ms, c, "--help"])))
    with open(os.path.join(out_dir, "moestream.1"), "w", encoding="utf-8") as f:
        f.write(page("moestream", version, "run mixture-of-experts language models larger than RAM from SSD",
                     sections))
    w = os.path.join(bin_dir, "moestream-worker")
    with open(os.path.join(out_dir, "moestream-worker.1"), "w", encoding="utf-8") as f:
        f.write(page("moestream-worker", version, "serve routed experts of a shard to moestream coordinators",
                     [("SYNOPSIS", help_of([w, "--help"]))]))


if __name__ == "__main__":
    main()
