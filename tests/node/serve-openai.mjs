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
/* logprobs, n and penalties as the client sends them */
const lpa = await client.completions.create({ model: 'm', prompt: [5, 9, 13], max_tokens: 4, logprobs: 2 });
const logprobs = { ids: lpa.choices[0].token_ids, token_logprobs: lpa.choices[0].logprobs.token_logprobs };
const chatLp = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 3,
  logprobs: true, top_logprobs: 2 });
const chatLogprobs = { n: chatLp.choices[0].token_ids.length, content: chatLp.choices[0].logprobs.content.map(
  (e) => ({ token_id: e.token_id, logprob: e.logprob, top: e.top_logprobs.length })) };
const nBody = { model: 'm', prompt: [5, 9, 13], max_tokens: 6, temperature: 0.9, seed: 5 };
const n3 = (await client.completions.create({ ...nBody, n: 3 })).choices.map((c) => ({ index: c.index, ids: c.token_ids }));
const solo = [];
for (const seed of [5, 6, 7]) solo.push((await client.completions.create({ ...nBody, seed })).choices[0].token_ids);
const penBody = { model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 8, presence_penalty: 1.5,
  frequency_penalty: 0.5, logit_bias: { 7: 2 } };
const pen = [];
for (let i = 0; i < 2; i++) pen.push((await client.chat.completions.create(penBody)).choices[0].token_ids);
const after = await whole(reqs[0]);
process.stdout.write(JSON.stringify({ seq, conc, stream: str, wrong_key: wrongKey, bad_field: badField, models, retrieved,
  neutral, logprobs, chat_logprobs: chatLogprobs, n3, solo, pen, after }) + '\n');
