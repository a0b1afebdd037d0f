// serve-client.mjs: the client side of tests/bench/serve.sh: sends streamed completion requests
// to `moestream serve`, all at once or one after another, and records when each token arrived
// (Node's built-in fetch, no packages). Prints one JSON object:
//   {"wall": seconds, "requests": [{"sent": s, "tokens": [[t, n_ids]...], "ids": [...], "finish"}]}
// with times in seconds from the start of the run.
// usage: node serve-client.mjs URL KEY REQUESTS.json concurrent|sequential
import { readFileSync } from 'node:fs';

const [url, key, file, mode] = process.argv.slice(2);
const reqs = JSON.parse(readFileSync(file, 'utf8')); // [completion bodies]
const t0 = performance.now();
const now = () => (performance.now() - t0) / 1000;

async function one(body) {
  const r = { sent: now(), tokens: [], ids: [], finish: null, status: 0 };
  const res = await fetch(url + '/v1/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(key ? { Authorization: 'Bearer ' + key } : {}) },
    body: JSON.stringify({ ...body, stream: true }),
  });
  r.status = res.status;
  if (!res.ok) {
    r.error = await res.text();
    return r;
  }
  const dec = new TextDecoder();
  let buf = '';
  for await (const part of res.body) {
    const t = now(); // when these bytes arrived
    buf += dec.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const c = JSON.parse(ev.slice(6)).choices[0];
      if (!c) continue;
      if (c.token_ids.length) {
        r.tokens.push([t, c.token_ids.length]);
        r.ids.push(...c.token_ids);
      }
      if (c.finish_reason) r.finish = c.finish_reason;
    }
  }
  return r;
}

let results;
if (mode === 'concurrent') {
  results = await Promise.all(reqs.map(one));
} else {
  results = [];
  for (const b of reqs) results.push(await one(b));
}
process.stdout.write(JSON.stringify({ wall: now(), requests: results }) + '\n');
