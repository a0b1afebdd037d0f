#!/usr/bin/env python3
"""conversation.py BIN MODEL OUT BUDGET...: the measurements of conversation.sh (results.json in OUT)."""
import http.client, json, os, platform, re, subprocess, sys, threading, time

bin_, model, out = sys.argv[1:4]
budgets = sys.argv[4:]


def drop():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def cache_size(budget):
    """The prefix cache's share: an eighth of the budget, at most 256 MiB."""
    n = int(subprocess.run(["numfmt", "--from=iec", budget], capture_output=True, text=True).stdout)
    return str(min(n // 8, 256 << 20))


def start_serve(budget, cache):
    log = open(os.path.join(out, "serve-%s-%d.log" % (budget, cache)), "w")
    args = [bin_, "serve", "--model", model, "--listen", "127.0.0.1:0", "--ram-budget", budget, "--max-batch", "1",
            "--max-context", "2048"]
    if cache:
        args += ["--prefix-cache", cache_size(budget)]
    p = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in p.stderr:
        log.write(line)
        m = re.search(r"listening on http://127.0.0.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [log.write(l) for l in p.stderr], daemon=True).start() # the access log
            return p, int(m.group(1)), log
    raise SystemExit("serve did not start (%s)" % budget)


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("GET", "/metrics")
    t = c.getresponse().read().decode()
    m = re.search(r"\n%s (\S+)" % re.escape(name), t)
    return float(m.group(1)) if m else 0.0


def turn(port, messages):
    """Streamed chat: (seconds to the first token, token ids, content)."""
    body = json.dumps({"messages": messages, "max_tokens": 16, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    ttft, ids, text = None, [], ""
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: {"):
            continue
        ch = json.loads(line[6:])["choices"]
        if not ch:
            continue
        if ch[0].get("token_ids") and ttft is None:
            ttft = time.time() - t0
        ids += ch[0].get("token_ids") or []
        text += (ch[0].get("delta") or {}).get("content") or ""
    return ttft, ids, text


words = ("the weather over the northern hills changed slowly while the river kept its course and the people of the "
         "valley talked about harvests markets and the long winter that everyone expected").split()


def question(i):
    return " ".join(words[(i * 7 + k) % len(words)] for k in range(34)) + "?"


results = {"machine": "%s, %d CPUs" % (platform.processor() or platform.machine(), os.cpu_count()),
           "model": json.load(open(os.path.join(model, "config.json"))).get("model_type", "?"), "turns": {}, "jobs": {}}
system = ("You are a careful assistant. Answer briefly, check every fact, and say when you are not sure. " * 9).strip()
for b in budgets:
    runs = {}
    for cache in (0, 1):
        p, port, log = start_serve(b, cache)
        msgs, rows = [{"role": "system", "content": "Be brief."}], []
        for t in range(4):
            msgs.append({"role": "user", "content": question(t)})
            drop()
            before = metric(port, "moestream_bytes_read_total")
            ttft, ids, text = turn(port, msgs)
            after = metric(port, "moestream_bytes_read_total")
            rows.append({"ttft": ttft, "ids": ids, "gb": (after - before) / 1e9,
                         "prompt": metric(port, "moestream_prompt_tokens_total")})
            msgs.append({"role": "assistant", "content": text})
        p.terminate()
        p.wait()
        log.close()
        runs[cache] = rows
    prev = 0
    results["turns"][b] = []
    for t in range(4):
        off, on = runs[0][t], runs[1][t]
        results["turns"][b].append({"turn": t + 1, "prompt_tokens": int(off["prompt"] - prev), "ttft_off": off["ttft"],
                                    "ttft_on": on["ttft"], "gb_off": off["gb"], "gb_on": on["gb"], "same": off["ids"] == on["ids"]})
        prev = off["prompt"]
    # jobs sharing a system prompt
    inp = os.path.join(out, "jobs.jsonl")
    with open(inp, "w") as f:
        for j in range(16):
            f.write(json.dumps({"custom_id": "j%d" % j, "url": "/v1/chat/completions", "body": {
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": question(j)[:60]}],
                "max_tokens": 16}}) + "\n")
    jr = {}
    for cache in (0, 1):
        o = os.path.join(out, "jobs-%s-%d.out" % (b, cache))
        if os.path.exists(o):
            os.unlink(o)
        drop()
        # with: jobs as it runs by default (the shared beginning prefilled once, its state kept in the
        # room the plan reserves for it); without: --no-shared-prefill (every job prefills its whole prompt)
        args = [bin_, "jobs", "--model", model, "--input", inp, "--output", o, "--ram-budget", b, "--json-progress"]
        if not cache:
            args += ["--no-shared-prefill"]
        t0 = time.time()
        r = subprocess.run(args, capture_output=True, text=True)
        wall = time.time() - t0
        final = [json.loads(l) for l in r.stderr.splitlines() if l.startswith("{") and '"final":true' in l]
        ids = {json.loads(l)["custom_id"]: json.loads(l)["response"]["body"]["choices"][0]["token_ids"] for l in open(o)}
        jr[cache] = (wall, final[-1]["bytes_read"] / 1e9 if final else 0, ids)
    results["jobs"][b] = {"wall_off": jr[0][0], "wall_on": jr[1][0], "gb_off": jr[0][1], "gb_on": jr[1][1],
                          "same": jr[0][2] == jr[1][2]}
tok = subprocess.run([bin_, "tokenize", "--model", model, "--chat", "/dev/stdin"], input=json.dumps(
    {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "x"}]}), capture_output=True, text=True)
results["system_tokens"] = len(tok.stdout.split()) if tok.returncode == 0 else 0
json.dump(results, open(os.path.join(out, "results.json"), "w"), indent=1)
