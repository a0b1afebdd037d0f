#!/usr/bin/env python3
"""make-seeds.py: writes the seed corpora of tests/fuzz/corpus/<harness>/ from the reference
fixtures (../shared/fixtures) and from hand-built messages. Usage:
  python3 tests/fuzz/make-seeds.py SHARED_FIXTURES_DIR MOESTREAM_BINARY
fuzz_worker's seeds (requests for its synthetic model) are written by the harness itself:
  FUZZ_WORKER_SEEDS=tests/fuzz/corpus/fuzz_worker build-fuzz/fuzz_worker -runs=0
Every seed is small (a few KB at most): safetensors files keep only a few small tensors of the
fixture checkpoints (their real header entries and bytes, re-laid contiguously)."""
import hashlib, json, os, re, shutil, struct, subprocess, sys, tempfile

fix, moestream = sys.argv[1], sys.argv[2]
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "corpus")


def put(harness, data, tag=""):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(root, harness)
    os.makedirs(d, exist_ok=True)
    name = (tag + "-" if tag else "") + hashlib.sha1(data).hexdigest()[:12]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        return h, 8 + n, path


def st_cut(h, base, path, names, meta=None, pad=True):
    """A safetensors file holding only `names` (their header entries and bytes), laid out contiguously."""
    out, data = {}, b""
    if meta is not None:
        out["__metadata__"] = meta
    with open(path, "rb") as f:
        for k in names:
            e = dict(h[k])
            b, en = e["data_offsets"]
            f.seek(base + b)
            chunk = f.read(en - b)
            e["data_offsets"] = [len(data), len(data) + len(chunk)]
            data += chunk
            out[k] = e
    hdr = json.dumps(out, separators=(",", ":")).encode()
    if pad:
        hdr += b" " * (-len(hdr) % 8)
    return struct.pack("<Q", len(hdr)) + hdr + data


# ---- safetensors files
ck = os.path.join(fix, "kimi-k3", "checkpoints")
files = [os.path.join(ck, "tiny-s1234", "model.safetensors")] + sorted(
    os.path.join(ck, "tiny-released-like", f)
    for f in os.listdir(os.path.join(ck, "tiny-released-like")) if f.endswith(".safetensors"))
for i, p in enumerate(files):
    h, base, _ = st_read(p)
    ts = sorted((v["data_offsets"][1] - v["data_offsets"][0], k) for k, v in h.items() if k != "__metadata__")
    by_dtype = {}
    for sz, k in ts:
        by_dtype.setdefault(h[k]["dtype"], []).append(k)
    small = [k for sz, k in ts if sz <= 512][:4]
    one_each = [v[0] for v in by_dtype.values()]
    one_each = [k for k in one_each if h[k]["data_offsets"][1] - h[k]["data_offsets"][0] <= 2048]
    put("fuzz_st", st_cut(h, base, p, small), "fixture%d-small" % i)
    if one_each:
        put("fuzz_st", st_cut(h, base, p, one_each, meta={"format": "pt"}), "fixture%d-dtypes" % i)
    put("fuzz_st", st_cut(h, base, p, small[:2], pad=False), "fixture%d-unpadded" % i)
put("fuzz_st", struct.pack("<Q", 2) + b"{}", "empty")

# ---- index.json beside the harness's shards (a, b in shard 1; c in shard 2)
s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
put("fuzz_st_index", json.dumps({"metadata": {"total_size": 48}, "weight_map": {"a": s1, "b": s1, "c": s2}}, indent=2), "ok")
put("fuzz_st_index", json.dumps({"weight_map": {"a": s1, "b": s1}}), "missing-shard2")
put("fuzz_st_index", json.dumps({"weight_map": {"a": s1, "b": s2, "c": s2}}), "wrong-shard")
with open(os.path.join(ck, "tiny-released-like", "model.safetensors.index.json")) as f:
    idx = json.load(f)
wm = dict(list(idx["weight_map"].items())[:12])
put("fuzz_st_index", json.dumps({"metadata": idx.get("metadata", {}), "weight_map": wm}, indent=2), "fixture-head")

# ---- config.json: flat, nested (released), fixture-wrapped, and the fixture's bad ones
k3 = os.path.join(fix, "kimi-k3")
for rel in ["checkpoints/tiny-s1234/config.json", "checkpoints/tiny-released-like/config.json",
            "released/config.json", "bad-configs/no_layermap.json", "bad-configs/bad_layer_index.json",
            "bad-configs/bad_topk.json"]:
    with open(os.path.join(k3, rel), "rb") as f:
        put("fuzz_k3_cfg", f.read(), rel.replace("/", "-").replace(".json", ""))
with open(os.path.join(k3, "tiny-oracle", "tiny_k3.json")) as f:
    put("fuzz_k3_cfg", json.dumps({"config": json.load(f)["config"]}), "fixture-wrapped")
# issue 12 defect 4: a huge layer count with a matching layer map (once 20 s and 2 GB)
with open(os.path.join(k3, "checkpoints", "tiny-s1234", "config.json")) as f:
    c = json.load(f)
c["num_hidden_layers"], c["full_attn_layers"] = 2000000000, [2000000000]
put("fuzz_k3_cfg", json.dumps(c), "huge-layers")

# ---- pack manifests: the fixture tiny-s1234 sharded over 2 workers (replicas 2), a few entries kept
tmp = tempfile.mkdtemp()
try:
    subprocess.run([moestream, "shard", "--model", os.path.join(ck, "tiny-s1234"), "--workers", "2",
                    "--replicas", "2", "--out", tmp], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    for w in range(2):
        with open(os.path.join(tmp, "worker-%d" % w, "manifest.json")) as f:
            m = json.load(f)
        xfmt = m["expert_format"]
        m["experts"] = m["experts"][:3 + w]
        put("fuzz_pack", json.dumps(m, indent=1), "worker%d" % w)
    m["experts"] = []
    put("fuzz_pack", json.dumps(m), "no-experts")
finally:
    shutil.rmtree(tmp)


# ---- wire messages (hand-encoded protobuf, proto/moestream.proto)
def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def fld(num, wt, payload):
    tag = varint(num << 3 | wt)
    if wt == 0:
        return tag + varint(payload)
    return tag + varint(len(payload)) + payload


def msg(*parts):
    return b"".join(parts)


with open(os.path.join(here, "..", "..", "common", "wire", "ms_wire.h")) as f:
    version = int(re.search(r"#define MS_WIRE_VERSION (\d+)u", f.read()).group(1))
uuid = bytes(range(16))
floats = lambda xs: b"".join(struct.pack("<f", x) for x in xs)
u32s = lambda xs: b"".join(varint(x) for x in xs)
env = lambda body_num, body: fld(1, 0, version) + fld(body_num, 2, body)
f32 = lambda x: struct.pack("<f", x)


def expert_format(x):
    """ExpertFormat (proto/moestream.proto) of a manifest's "expert_format" object."""
    a = x["activation"]
    params = [v for k, v in a.items() if k != "name"]  # in the manifest's order: the table's (b1, b2)
    act = msg(fld(1, 2, a["name"].encode()), fld(4, 2, floats(params)))  # protocol 3: packed params
    mats = [fld(5, 2, msg(fld(1, 2, m["name"].encode()), fld(2, 0, m["rows"]), fld(3, 0, m["cols"]),
                          fld(4, 2, m["encoding"].encode()), fld(5, 2, m["role"].encode()),
                          *([fld(6, 2, m["bias"].encode())] if "bias" in m else []))) for m in x["matrices"]]
    parts = [fld(6, 2, msg(fld(1, 2, p["name"].encode()), fld(2, 2, p["dtype"].encode()),
                           fld(3, 2, u32s(p["shape"])), fld(4, 0, p["bytes"]))) for p in x["parts"]]
    return msg(fld(1, 2, x["family"].encode()), fld(2, 0, x["latent"]), fld(3, 0, x["inter"]), fld(4, 2, act),
               *mats, *parts)


xf = expert_format(xfmt)
put("fuzz_wire", env(10, msg(fld(1, 2, uuid), fld(2, 2, b"0123456789abcdef"), fld(3, 2, xf))), "hello")
put("fuzz_wire", env(11, msg(fld(1, 2, uuid), fld(2, 2, b"0123456789abcdef"),
                            fld(3, 2, msg(fld(1, 0, 1), fld(2, 0, 0), fld(3, 0, 4))),
                            fld(3, 2, msg(fld(1, 0, 2), fld(2, 0, 4), fld(3, 0, 8))),
                            fld(4, 0, 1 << 30), fld(5, 0, 4), fld(6, 0, 13), fld(7, 0, 8), fld(8, 2, xf),
                            fld(9, 0, 1))), "hello-reply")
put("fuzz_wire", env(12, msg(fld(1, 2, uuid), fld(2, 0, 3), fld(3, 0, 2), fld(4, 0, 4),
                            fld(5, 2, floats([0.5, -1, 2, 3, 4, 5, 6, 7])), fld(6, 2, u32s([0, 1, 1])),
                            fld(7, 2, u32s([2, 5, 7])), fld(8, 0, 1700000000000))), "compute")
put("fuzz_wire", env(13, msg(fld(1, 2, uuid), fld(2, 0, 2), fld(3, 0, 2), fld(4, 2, floats([1, 2, 3, 4])))),
    "compute-reply")
put("fuzz_wire", env(14, msg(fld(1, 2, uuid), fld(2, 0, 6), fld(3, 2, b"layer 3 expert 9 is not owned"))), "error")
put("fuzz_wire", env(15, fld(1, 0, 42)), "ping")
put("fuzz_wire", env(16, msg(fld(1, 0, 42), fld(2, 2, uuid))), "pong")
put("fuzz_wire", env(17, b""), "stats")
put("fuzz_wire", env(18, msg(*[fld(i, 0, 1000 * i) for i in range(1, 8)])), "stats-reply")
put("fuzz_wire", fld(1, 0, version + 1) + fld(15, 2, b""), "other-version")

# ---- expert format descriptors: JSON (first byte 0) and protobuf (first byte 1)
put("fuzz_xfmt", b"\0" + json.dumps(xfmt, indent=1).encode(), "json")
put("fuzz_xfmt", b"\1" + xf, "proto")
bad = json.loads(json.dumps(xfmt))
bad["parts"] = bad["parts"][:5]
put("fuzz_xfmt", b"\0" + json.dumps(bad).encode(), "json-5-parts")

# gpt-oss's descriptor (interleaved gate_up, biases, swiglu_clamp) from a pack of its fixture
tmp = tempfile.mkdtemp()
try:
    subprocess.run([moestream, "shard", "--model", os.path.join(fix, "gpt-oss", "checkpoints", "tiny-s7"), "--workers",
                    "1", "--out", tmp], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(tmp, "worker-0", "manifest.json")) as f:
        m = json.load(f)
    put("fuzz_xfmt", b"\0" + json.dumps(m["expert_format"], indent=1).encode(), "gptoss-json")
    put("fuzz_xfmt", b"\1" + expert_format(m["expert_format"]), "gptoss-proto")
    m["experts"] = m["experts"][:2]
    put("fuzz_pack", json.dumps(m, indent=1), "gptoss")
finally:
    shutil.rmtree(tmp)

# ---- CURVE key files (first byte: 1 secret, 0 allow list); public keys only in the repo
tmp = tempfile.mkdtemp()
try:
    pubs = []
    for i in range(2):
        subprocess.run([moestream, "keygen", "--out", os.path.join(tmp, "k%d" % i)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(tmp, "k%d.pub" % i), "rb") as f:
            pubs.append(f.read().strip())
finally:
    shutil.rmtree(tmp)
put("fuzz_keys", b"\1" + pubs[0] + b"\n", "one-key")
put("fuzz_keys", b"\0# coordinators allowed\n\n" + pubs[0] + b"\n# second\n" + pubs[1] + b"\n", "allow-list")
put("fuzz_keys", b"\1" + pubs[0][:39] + b"\n", "short-key")

# ---- endpoints (first byte: 1 bind, 0 connect)
for i, e in enumerate(["tcp://127.0.0.1:5555", "tcp://*:0", "tcp://[::1]:7000", "tcp://worker-3.example:65535",
                       "ipc:///tmp/moestream-x/worker-0.sock", "inproc://w", "tcp://host:99999", "udp://x:1"]):
    put("fuzz_endpoint", bytes([i & 1]) + e.encode(), "ep%d" % i)

# ---- tokenizer: texts of the reference cases (first byte: 0 plain, 1 specials allowed)
with open(os.path.join(fix, "tokenizer", "kimi-o200k", "cases.jsonl")) as f:
    cases = [json.loads(l) for l in f]
cases = [c for c in cases if len(c["text"].encode()) <= 2000]
step = max(1, len(cases) // 48)
for i, c in enumerate(cases[::step]):
    put("fuzz_tok_encode", bytes([i & 1]) + c["text"].encode(), "case")
put("fuzz_tok_encode", b"\x01[BOS]Hello, world!<|im_end|>[EOS]", "specials")
put("fuzz_tok_encode", b"\x00caf\xc3\xa9 \xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87 12345 \xff", "mixed-invalid")
# ids: small ones, the specials (1024..1026 for the harness's 1024-rank synth), reference ids folded into range
put("fuzz_tok_decode", b"".join(struct.pack("<i", x) for x in range(0, 300, 7)), "ranks")
put("fuzz_tok_decode", b"".join(struct.pack("<i", x) for x in [1024, 72, 101, 1025, 1026]), "specials")
for c in cases[:200:25]:
    put("fuzz_tok_decode", b"".join(struct.pack("<i", x % 1027) for x in c["ids"][:200]), "case")
put("fuzz_tok_decode", struct.pack("<iii", 5, -1, 1027), "out-of-range")

# ---- tokenizer files: tiktoken.model, a NUL byte, tokenizer_config.json (the synth's, cut)
tmp = tempfile.mkdtemp()
try:
    subprocess.run([moestream, "synth", "--out", tmp, "--preset", "tiny"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(tmp, "tiktoken.model"), "rb") as f:
        ranks = f.read().splitlines()
    with open(os.path.join(tmp, "tokenizer_config.json")) as f:
        tc = json.load(f)
finally:
    shutil.rmtree(tmp)
specials = sorted(tc["added_tokens_decoder"].items(), key=lambda kv: int(kv[0]))
for keep in (len(ranks), 300, 256):
    dec = {str(keep + i): v for i, (k, v) in enumerate(specials)}
    put("fuzz_tok_load", b"\n".join(ranks[:keep]) + b"\n\0" + json.dumps({"added_tokens_decoder": dec}).encode(),
        "synth%d" % keep)
put("fuzz_tok_load", b"\n".join(ranks[:40]) + b"\n\0{}", "no-specials")
with open(os.path.join(fix, "tokenizer", "kimi-o200k", "tiktoken.model"), "rb") as f:
    head = b"".join(f.readline() for _ in range(300))
put("fuzz_tok_load", head + b"\0" + json.dumps({"added_tokens_decoder": {"300": {"content": "<|im_end|>"}}}).encode(),
    "o200k-head")

# ---- id lists
for i, s in enumerate(["1,2,3", " 10 , 20\n30\t40 ", "0", "2147483647", "2147483648", "1,,3", ",1", "1,",
                       "-1", "+5", "1 2 3", "12abc", "", "   ", "007,8"]):
    put("fuzz_ids", s, "ids%d" % i)

# ---- request bodies: first byte 0 = a jobs line, 1 = a completions body, 2 = a chat body
for i, s in enumerate([
        b'\x00{"custom_id":"c1","method":"POST","url":"/v1/completions","body":{"prompt":"The weather today is","max_tokens":6}}',
        b'\x00{"custom_id":"c2","prompt":[5,17,200,33],"max_tokens":9,"temperature":0.9,"seed":7}',
        b'\x00{"custom_id":"c5","url":"/v1/chat/completions","body":{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Name a color."}],"max_tokens":7}}',
        b'\x00this is not json',
        b'\x01{"prompt":"Hello","max_tokens":4,"temperature":0.7,"top_p":0.9,"seed":3,"stop":["\\n","END"],"stream":true,"stream_options":{"include_usage":true}}',
        b'\x01{"prompt":[1,2,3],"max_tokens":2,"n":1,"model":"kimi-k3"}',
        b'\x01{"prompt":"x","n":2}',
        b'\x01{"prompt":"x","max_tokens":"many"}',
        b'\x02{"messages":[{"role":"user","content":"Name a color."}],"max_tokens":32,"stream":true}',
        b'\x02{"messages":[{"role":"assistant","content":[{"type":"text","text":"hi \\u00e9"}]}]}',
        b'\x02{"messages":[]}',
        # found by the harness: a JSON error message quoting bytes that are not UTF-8
        b'\x02{"messages":[{"role":"assistant","contknt":[{"t":"text","text":"hi \\u0\xd0\xa49"}]}]}',
        b'\x01{"prompt":[1,2,3],"max_tokens":4,"logprobs":3,"presence_penalty":0.5,"frequency_penalty":-1,"logit_bias":{"7":3,"2":-100},"top_k":5,"min_p":0.1}',
        b'\x02{"messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"logprobs":true,"top_logprobs":20,"skip_special_tokens":false,"n":1}',
        b'\x00{"prompt":[4],"logprobs":1,"logit_bias":{"x":1},"n":2}']):
    put("fuzz_request", s, "req%d" % i)

# fuzz_chat: every harmony case of the fixture as a request body (messages, tools, the template's
# variables as chat_template_kwargs; first byte 1: add_generation_prompt false allowed), and the
# OpenAI shape of a tool-call round trip (arguments as JSON text, reasoning_content).
for line in open(os.path.join(fix, "gpt-oss", "chat", "chat-cases.jsonl"), encoding="utf-8"):
    c = json.loads(line)
    body = {"messages": c["messages"]}
    if c.get("tools"):
        body["tools"] = c["tools"]
    kw = {k: c[k] for k in ("reasoning_effort", "model_identity", "builtin_tools", "add_generation_prompt") if k in c}
    if kw:
        body["chat_template_kwargs"] = kw
    put("fuzz_chat", b"\1" + json.dumps(body, ensure_ascii=False).encode(), "case")
put("fuzz_chat", b"\0" + json.dumps({
    "messages": [{"role": "user", "content": "Weather?"},
                 {"role": "assistant", "content": None, "reasoning_content": "call",
                  "tool_calls": [{"id": "c1", "type": "function",
                                  "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"n\": 1e-7}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "18C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {
        "type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "A city"},
            "unit": {"type": "string", "enum": ["c", "f"], "default": "c"},
            "when": {"oneOf": [{"type": "string", "description": "ISO"}, {"type": "integer"}], "default": "now"},
            "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": ["string", "null"]}}}},
            "n": {"type": "number", "default": 0.1}}}}}],
    "tool_choice": "auto", "reasoning_effort": "high"}).encode(), "openai-tool-round-trip")
