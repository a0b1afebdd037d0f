#!/usr/bin/env python3
"""chat_jinja: harmony prompts from `moestream tokenize --chat` against the released chat_template.jinja rendered by Jinja2.

An independent reference beyond the fixture's 20 cases: 400 conversations and tool schemas made
from a fixed seed (so every run checks the same ones) are rendered by the real template through
Jinja2, set up as the fixture's README says transformers does it, and by moestream; the texts
must be equal byte for byte. Where the template raises, moestream must refuse (exit 5); where
moestream is stricter by design (a system message after the first, several tool calls in one
message: docs/API.md), it must refuse with exit 5 too. A tool call's arguments go to Jinja as
the object and to moestream as OpenAI's JSON-text string, so the check also covers that they
render alike.

usage: chat_jinja.py MOESTREAM [CASES]   (skips, exit 77, without ../shared or Jinja2)
"""
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("MS_SHARED_DIR", os.path.join(HERE, "..", "..", "shared"))
TEMPLATE = os.path.join(SHARED, "fixtures", "gpt-oss", "chat", "chat_template.jinja")


def skip(why):
    print(f"SKIP: chat_jinja: {why}")
    sys.exit(77)


try:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    # a Python from elsewhere (pyenv) does not see Debian's python3-jinja2: try the system one
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") \
            and not os.environ.get("MS_CHAT_JINJA_REEXEC"):
        os.environ["MS_CHAT_JINJA_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    skip("Jinja2 is not installed (Debian: python3-jinja2)")

WORDS = ["weather", "Paris", "the", "ünïcödé", "日本語", "emoji 😀", "a\nb", "  spaced  ", "tab\there", "quote\"s",
         "back\\slash", "<|end|>", "x", "", "42", "multi\n\nline", "cursor", "functions", "json"]


def text(r, n=4):
    return " ".join(r.choice(WORDS) for _ in range(r.randint(0, n)))


def scalar(r):
    return r.choice([0, 1, -3, 2.5, 0.1, 1e-7, 1e16, True, False, None, "s", "ü", "", [1, "a"], {"k": 1.5}])


def schema(r, depth=0):
    """A JSON-schema fragment of the kinds tool definitions use."""
    kinds = ["string", "enum", "number", "integer", "boolean", "array", "object", "typelist", "oneof", "none"]
    if depth > 2:
        kinds = kinds[:5]
    k = r.choice(kinds)
    if k == "enum":
        s = {"type": "string", "enum": r.sample(["a", "b", "celsius", "fahrenheit", "x y"], r.randint(1, 3))}
    elif k == "array":
        s = {"type": "array"}
        if r.random() < 0.8:
            s["items"] = schema(r, depth + 1) if r.random() < 0.6 else {"type": r.choice(["string", "number", "integer", "boolean"])}
    elif k == "object":
        s = {"type": "object"}
        if r.random() < 0.8:
            s["properties"] = {f"p{i}{r.choice(['', '_x', 'ß'])}": schema(r, depth + 1) for i in range(r.randint(0, 3))}
            if s["properties"] and r.random() < 0.6:
                s["required"] = r.sample(list(s["properties"]), r.randint(0, len(s["properties"])))
    elif k == "typelist":
        s = {"type": r.sample(["string", "number", "null", "object"], r.randint(1, 3))}
    elif k == "oneof":
        s = {"oneOf": [schema(r, depth + 1) for _ in range(r.randint(1, 3))]}
        for v in s["oneOf"]:
            if r.random() < 0.3:
                v["description"] = text(r, 3) or "d"
            if r.random() < 0.2:
                v["default"] = scalar(r)
    elif k == "none":
        s = {}
    else:
        s = {"type": k}
    if r.random() < 0.2:
        s["nullable"] = r.choice([True, False])
    return s


def tool(r, i):
    f = {"name": f"tool_{i}{r.choice(['', '_get', 'X'])}", "description": text(r, 5) or "Does a thing"}
    if r.random() < 0.85:
        props = {}
        for j in range(r.randint(0, 4)):
            p = schema(r)
            if r.random() < 0.5:
                p["description"] = text(r, 4)
            if r.random() < 0.3:
                p["default"] = (r.choice(p["enum"]) if p.get("enum") else "q") if (p.get("enum") or p.get("oneOf")) else scalar(r)
            props[f"arg{j}"] = p
        f["parameters"] = {"type": "object", "properties": props}
        if props and r.random() < 0.7:
            f["parameters"]["required"] = r.sample(list(props), r.randint(0, len(props)))
    return {"type": "function", "function": f}


def conversation(r):
    """(jinja_messages, moestream_messages, tools, kwargs, expect): expect is 'render' unless moestream refuses by design."""
    msgs, ours, expect = [], [], "render"
    tools = [tool(r, i) for i in range(r.randint(1, 3))] if r.random() < 0.5 else None
    if r.random() < 0.5:
        m = {"role": r.choice(["system", "developer"]), "content": text(r, 6)}
        msgs.append(m)
        ours.append(dict(m))
    for turn in range(r.randint(1, 4)):
        m = {"role": "user", "content": text(r, 6)}
        msgs.append(m)
        ours.append(dict(m))
        if turn == 0 and r.random() < 0.05:
            m = {"role": "system", "content": "late"}
            msgs.append(m)
            ours.append(dict(m))
            expect = "refuse"  # the template drops it silently; moestream says so
        if r.random() < 0.7:
            a = {"role": "assistant"}
            if tools and r.random() < 0.5:
                name = r.choice(tools)["function"]["name"]
                args = {"location": text(r, 2), "n": r.choice([1, 2.5, None, True]), "list": [1, "ü"]}
                a_j = dict(a, tool_calls=[{"type": "function", "function": {"name": name, "arguments": args}}])
                a_o = dict(a, tool_calls=[{"type": "function", "function": {"name": name,
                                                                                  "arguments": json.dumps(args)}}])
                if r.random() < 0.5:
                    a_j["thinking"] = a_o["thinking"] = text(r, 4) or "plan"
                if r.random() < 0.05:
                    a_j["tool_calls"] = a_j["tool_calls"] * 2
                    a_o["tool_calls"] = a_o["tool_calls"] * 2
                    expect = "refuse"  # the template renders the first call only; moestream refuses
                msgs.append(a_j)
                ours.append(a_o)
                res = {"role": "tool", "content": r.choice(['{"t": 18}', "plain result", "ü\n\"q\""])}
                msgs.append(res)
                ours.append(dict(res))
            else:
                a["content"] = text(r, 6)
                if r.random() < 0.5:
                    a["thinking"] = text(r, 4)
                msgs.append(a)
                ours.append(dict(a))
    kw = {}
    if r.random() < 0.5:
        kw["reasoning_effort"] = r.choice(["low", "medium", "high"])
    if r.random() < 0.2:
        kw["model_identity"] = "You are a test model."
    if r.random() < 0.2:
        kw["builtin_tools"] = r.sample(["browser", "python"], r.randint(0, 2))
    if r.random() < 0.15 and msgs[-1]["role"] == "assistant" and "tool_calls" not in msgs[-1]:
        kw["add_generation_prompt"] = False
    if r.random() < 0.03:  # a case the template raises on: a tool result with no call before it
        msgs.insert(len(msgs) - 1 if len(msgs) > 1 else 0, {"role": "tool", "content": "orphan"})
        ours.insert(len(ours) - 1 if len(ours) > 1 else 0, {"role": "tool", "content": "orphan"})
    return msgs, ours, tools, kw, expect


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    binary, cases = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 400
    if not os.path.exists(TEMPLATE):
        skip(f"{TEMPLATE} not found (shared fixtures absent)")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, **k: json.dumps(x, ensure_ascii=False)

    def raise_exception(m):
        raise jinja2.exceptions.TemplateError(m)

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda f: "2025-08-05"
    tpl = env.from_string(open(TEMPLATE, encoding="utf-8").read())
    r = random.Random(1)
    bad = 0
    counts = {"render": 0, "template raises": 0, "refused by design": 0}
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "gpt-oss-tiny")
        subprocess.run([binary, "synth", "--preset", "gpt-oss-tiny", "--out", model], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(cases):
            msgs, ours, tools, kw, expect = conversation(r)
            try:
                want = tpl.render(messages=msgs, tools=tools, documents=None,
                                  add_generation_prompt=kw.get("add_generation_prompt", True),
                                  bos_token="<|startoftext|>", eos_token="<|return|>", pad_token="<|endoftext|>",
                                  **{k: v for k, v in kw.items() if k != "add_generation_prompt"})
            except (jinja2.exceptions.TemplateError, TypeError) as e:
                want, expect = None, f"raises: {e}"
            body = {"messages": ours, "chat_template_kwargs": kw}
            if tools is not None:
                body["tools"] = tools
            path = os.path.join(tmp, "chat.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(body, f, ensure_ascii=False)
            p = subprocess.run([binary, "tokenize", "--model", model, "--chat", path, "--date", "2025-08-05", "--json"],
                               capture_output=True)
            if want is not None and expect == "render":
                counts["render"] += 1
                got = json.loads(p.stdout)["text"] if p.returncode == 0 else None
                if got != want:
                    bad += 1
                    print(f"case {i}: differs (exit {p.returncode}: {p.stderr.decode(errors='replace').strip()})")
                    print("  body:", json.dumps(body, ensure_ascii=False)[:2000])
                    print("  want:", repr(want)[:3000])
                    print("  got: ", repr(got)[:3000])
            else:
                counts["template raises" if want is None else "refused by design"] += 1
                if p.returncode != 5:
                    bad += 1
                    print(f"case {i}: {expect}, but moestream exited {p.returncode} (want 5: refused)")
                    print("  body:", json.dumps(body, ensure_ascii=False)[:2000])
    print(f"chat_jinja: {cases} cases ({', '.join(f'{v} {k}' for k, v in counts.items())}): {bad} wrong")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
