#!/usr/bin/env python3
"""layers.py: the structure the issue of families as modules asks for, checked from the code itself.

  1. Every #include "x.h" in coordinator/, common/, expert-worker/ goes to the file's own folder
     or to a folder its CMake layer links (transitively), as CMakeLists.txt declares them with
     ms_layer(): no arrow runs upward. (The build refuses most such includes already; this also
     catches a header reached through a transitive link that the layer did not declare.)
  2. No circle between modules (a module = a .c/.h pair and its private X_int.h: a.c includes
     b.h and b.c includes a.h).
  3. No family's symbol outside its own files: Kimi K3's outside coordinator/k3/ (its expert row
     in coordinator/k3/experts/ included), gpt-oss's outside coordinator/gptoss/, but the
     generated registry; a family's expert activation (SiTU, the clamped SwiGLU) may be named
     where the activation tables and kernels live.
  4. No file over 800 lines but the numeric kernels (common/kern/).

Prints every problem and exits 1 if there is one; prints the folder graph with -v.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC_DIRS = ["common", "coordinator", "expert-worker"]

# 3: each family's own files, the names only it may use, and its activation's (allowed in the
# kernel, table, compute and wire files).
# (MLA, its latent and rope widths are DeepSeek-V3's architecture too: a shared block in
# coordinator/blocks/, fenced no more; K3's own wiring of it is.)
FENCES = {
    "Kimi K3": (("coordinator/k3/",),
                re.compile(r"ms_k3_|\bkda\w*|KDA|\bis_mla\b|mla_heads|mla_out_gate|block_sparse_moe|first_dense|"
                           r"attn_res|full_attn|situ_b[12]|SiTU|situ|SITU", re.I),
                re.compile(r"SiTU|situ|SITU")),
    "gpt-oss": (("coordinator/gptoss/",),
                re.compile(r"ms_gptoss_\w*|\bgpt_oss\w*|swiglu_limit|gate_up_proj|swiglu_clamp", re.I),
                re.compile(r"swiglu_clamp", re.I)),
    "Qwen3-MoE": (("coordinator/qwen3/",),
                  re.compile(r"ms_qwen3_\w*|\bqwen3_moe\w*|mlp_only_layers|decoder_sparse_step", re.I),
                  re.compile(r"(?!)")),
    "DeepSeek-V3": (("coordinator/dsv3/",),
                    re.compile(r"ms_dsv3_\w*|\bdeepseek_v3\w*|\bkimi_k2\b|\bds_(model|seq|layer)\b|\beh_proj\b"),
                    re.compile(r"(?!)")),
}
REGISTRY = ("coordinator/families/ms_families.c",)
ACTIVATION_FILES = ("common/kern/ms_ops.", "common/kern/ms_act.", "common/xfmt/ms_xfmt.", "common/expert/ms_expert.", "proto/moestream.proto")
MAX_LINES = 800
KERNELS = "common/kern/"


def layers():
    """{folder: set of folders it may include from} from CMakeLists.txt."""
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    # the families' layers are made in a loop over MS_FAMILIES: expand it
    fams = re.search(r"set\(MS_FAMILIES\s+([^)]*)\)", text)
    loops = re.findall(r"foreach\(f \$\{MS_FAMILIES\}\)(.*?)endforeach\(\)", text, re.S)
    if fams and loops:
        body = "\n".join(line for loop in loops for line in loop.splitlines() if "ms_layer(" in line)
        text += "\n" + "\n".join(body.replace("${f}", f) for f in fams.group(1).split())
        text = text.replace("${ms_family_libs}", " ".join("ms" + f for f in fams.group(1).split()))
        text = text.replace("${ms_family_expert_libs}", " ".join("ms" + f + "experts" for f in fams.group(1).split()))
    lib_dir, deps = {}, {}
    for m in re.finditer(r"ms_layer\((\w+)\s+([\w/-]+)([^)]*)\)", text):
        name, d, rest = m.group(1), m.group(2), m.group(3)
        lib_dir[name] = d
        deps[name] = [w for w in rest.split() if w.startswith("ms")]
    for m in re.finditer(r"target_link_libraries\((\w+)\s+(?:PUBLIC|PRIVATE)\s+([^)#]*)\)", text):
        if m.group(1) in deps:
            deps[m.group(1)] += [w for w in m.group(2).split() if w.startswith("ms")]
    # executables: the CLI folder links msserve, the worker mswire (CMakeLists.txt)
    lib_dir["mscli"], deps["mscli"] = "coordinator/cli", ["msserve"]
    lib_dir["msworker"], deps["msworker"] = "expert-worker", ["mswire"]
    lib_dir["msproto"], deps["msproto"] = "build/proto", []
    reach = {}

    def closure(n, seen=()):
        if n in reach:
            return reach[n]
        out = {n}
        for d in deps.get(n, []):
            if d in seen:
                continue
            out |= closure(d, seen + (n,))
        reach[n] = out
        return out

    return {lib_dir[n]: {lib_dir[x] for x in closure(n) if x in lib_dir} for n in lib_dir}, deps, lib_dir


def module(path):
    """A module is a .c/.h pair; its private header X_int.h belongs to module X."""
    m = os.path.splitext(path)[0]
    return m[:-4] if m.endswith("_int") else m


def sources():
    for top in SRC_DIRS:
        for dp, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(dp, f), ROOT)


def main():
    verbose = "-v" in sys.argv
    allowed, deps, lib_dir = layers()
    files = list(sources())
    header_dir = {os.path.basename(f): os.path.dirname(f) for f in files if f.endswith(".h")}
    problems, edges, mod_edges = [], set(), {}
    for f in files:
        d = os.path.dirname(f)
        text = open(os.path.join(ROOT, f), errors="replace").read()
        mod = module(f)
        for inc in re.findall(r'#include\s+"([^"]+)"', text):
            hd = header_dir.get(inc)
            if hd is None:
                continue  # generated (moestream.pb-c.h) or a system header in quotes
            if hd != d:
                edges.add((d, hd))
                if hd not in allowed.get(d, {d}):
                    problems.append(f"{f}: includes {inc} from {hd}, which its layer ({d}) does not link")
            target = module(os.path.join(hd, inc))
            if target != mod:
                mod_edges.setdefault(mod, set()).add(target)
        # 3
        for fam, (own, symbols, activation) in FENCES.items():
            if f.startswith(own + REGISTRY):
                continue
            for n, line in enumerate(text.splitlines(), 1):
                for m in symbols.finditer(line):
                    if activation.fullmatch(m.group(0)) and f.startswith(ACTIVATION_FILES):
                        continue
                    problems.append(f"{f}:{n}: {fam} symbol '{m.group(0)}' outside the family's files")
        # 4
        lines = text.count("\n")
        if lines > MAX_LINES and not f.startswith(KERNELS):
            problems.append(f"{f}: {lines} lines (more than {MAX_LINES})")
    for f in [os.path.join("tests", "unit", x) for x in sorted(os.listdir(os.path.join(ROOT, "tests", "unit")))]:
        lines = open(os.path.join(ROOT, f), errors="replace").read().count("\n")
        if lines > MAX_LINES:
            problems.append(f"{f}: {lines} lines (more than {MAX_LINES})")
    # folder graph: acyclic (follows from 1, checked anyway)
    # 2: module circles (depth-first search for a back edge)
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(mod_edges.get(m, ())):
            if state.get(t) == 1:
                cyc = stack[stack.index(t):] + [t]
                problems.append("module circle: " + " -> ".join(cyc))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    sys.setrecursionlimit(10000)
    for m in sorted(mod_edges):
        if m not in state:
            visit(m)
    if verbose:
        for a, b in sorted(edges):
            print(f"{a} -> {b}")
    for p in problems:
        print("layers:", p)
    print(f"layers: {len(files)} files, {len(edges)} folder arrows, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
