// serve-openai.mjs: the official OpenAI client against `moestream serve`: every request of a
// list sequentially, all at once, and streamed; a wrong key and a bad request. Prints one JSON
// object with what it got; tests/unit/test_serve_node.c compares it with `moestream run`.
// usage: node serve-openai.mjs BASE_URL API_KEY REQUESTS.json
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const [url, key, file] = process.argv.slice(2);
const reqs = JSON.parse(readFileSync(file, 'utf8')); // [{chat: bool, body: {...}}]
const client = new OpenAI({ apiKey: key, baseURL: url + '/v1', maxRetries: 0, timeout: 60000 });

async function whole(r) {
  const a = r.chat ? await client.chat.completions.create(r.body) : await client.completions.create(r.body);
  const c = a.choices[0];
  return { ids: c.token_ids, text: r.chat ? c.message.content : c.text, finish: c.finish_reason, usage: a.usage };
}

async function streamed(r) {
  const body = { ...r.body, stream: true, stream_options: { include_usage: true } };
  const s = r.chat ? await client.chat.completions.create(body) : await client.completions.create(body);
  const out = { ids: [], text: '', finish: null, usage: null, chunks: 0 };
  for await (const chunk of s) {
    out.chunks++;
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    out.ids.push(...(c.token_ids || []));
    out.text += (r.chat ? c.delta.content : c.text) || '';
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

async function status(fn) {
  try {
    await fn();
    return 200;
  } catch (e) {
    return e.status || -1;
  }
}

const seq = [];
for (const r of reqs) seq.push(await whole(r));
const conc = await Promise.all(reqs.map(whole));
const str = [];
for (const r of reqs) str.push(await streamed(r));
const wrongKey = await status(() =>
  new OpenAI({ apiKey: key + 'x', baseURL: url + '/v1', maxRetries: 0 }).completions.create({ model: 'm', prompt: 'x' }));
const badField = await status(() => client.completions.create({ model: 'm', prompt: 'x', max_tokens: 'many' }));
const models = (await client.models.list()).data.map((m) => m.id);
const retrieved = (await client.models.retrieve('m')).id;
/* what clients send by default, at its neutral value: accepted */
const neutral = await status(() => client.chat.completions.create({
  model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 2, logprobs: false, presence_penalty: 0,
  frequency_penalty: 0, response_format: { type: 'text' } }));
const after = await whole(reqs[0]);
process.stdout.write(JSON.stringify({ seq, conc, stream: str, wrong_key: wrongKey, bad_field: badField, models, retrieved,
  neutral, after }) + '\n');
