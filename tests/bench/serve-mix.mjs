// serve-mix.mjs: the client side of tests/bench/serve-mix.sh: D streamed completions decode; once
// each has streamed `warm` tokens, one long prompt arrives; when its first token is in and every
// decoder has streamed `after` more tokens, the decoders are cancelled. Records when each token
// arrived (node:http). Prints one JSON object:
//   {"long": {"sent", "first", "prompt_tokens"}, "decoders": [{"sent", "tokens": [t...]}]}
// with times in seconds from the start of the run.
// usage: node serve-mix.mjs URL KEY DECODERS LONG_IDS_FILE WARM AFTER MAX_TOKENS VOCAB
import { readFileSync } from 'node:fs';
import http from 'node:http';

const [url, key, nd, idsFile, warmS, afterS, maxS, vocabS] = process.argv.slice(2);
const D = Number(nd), warm = Number(warmS), after = Number(afterS), maxTokens = Number(maxS);
const longIds = readFileSync(idsFile, 'utf8').trim().split(',').map(Number);
const t0 = performance.now();
const now = () => (performance.now() - t0) / 1000;
const headers = { 'Content-Type': 'application/json', ...(key ? { Authorization: 'Bearer ' + key } : {}) };

// Read a stream's events; onToken(t) for each event carrying token ids. node:http, not fetch:
// fetch gives up on a body silent for 5 minutes, and a long prompt's first token can take longer.
function stream(body, signal, onToken) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify({ ...body, stream: true });
    const req = http.request(url + '/v1/completions', { method: 'POST', headers: { ...headers, 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      if (res.statusCode !== 200) {
        let t = '';
        res.on('data', (c) => (t += c));
        res.on('end', () => reject(new Error(`status ${res.statusCode}: ${t}`)));
        return;
      }
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (part) => {
        const t = now();
        buf += part;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
          const c = JSON.parse(ev.slice(6)).choices[0];
          if (c && c.token_ids && c.token_ids.length) onToken(t);
        }
      });
      res.on('end', resolve);
      res.on('error', (e) => (signal && signal.aborted ? resolve() : reject(e)));
    });
    req.on('error', (e) => (signal && signal.aborted ? resolve() : reject(e)));
    if (signal) signal.addEventListener('abort', () => req.destroy());
    req.end(data);
  });
}

const abort = new AbortController();
const decoders = [];
let longFirst = null;
let waiters = [];
const check = () => { waiters = waiters.filter((w) => !w()); };
const until = (cond) => new Promise((resolve) => { waiters.push(() => (cond() ? (resolve(), true) : false)); check(); });

const runs = [];
for (let d = 0; d < D; d++) {
  const r = { sent: now(), tokens: [] };
  decoders.push(r);
  const prompt = Array.from({ length: 8 }, (_, t) => (d * 7919 + t * 104729 + 17) % (Number(vocabS) - 1));
  runs.push(stream({ model: 'm', prompt, max_tokens: maxTokens }, abort.signal, (t) => { r.tokens.push(t); check(); }));
}
await until(() => decoders.every((r) => r.tokens.length >= warm));
const long = { sent: now(), first: null, prompt_tokens: longIds.length };
const longRun = stream({ model: 'm', prompt: longIds, max_tokens: 1 }, null, (t) => { if (long.first === null) long.first = t; check(); });
await until(() => long.first !== null);
const counts = decoders.map((r) => r.tokens.length);
await until(() => decoders.every((r, i) => r.tokens.length >= counts[i] + after));
abort.abort();
await Promise.allSettled(runs);
await longRun;
process.stdout.write(JSON.stringify({ wall: now(), long, decoders }) + '\n');
