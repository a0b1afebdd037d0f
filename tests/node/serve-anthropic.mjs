// serve-anthropic.mjs: the official Anthropic client (@anthropic-ai/sdk) against `moestream serve`'s
// /v1/messages: a message whole and streamed (with a tool offered), count_tokens, a wrong key and
// a bad request, and the client's stream helper on the events of an answer that calls a tool.
// Prints one JSON object with what it got; tests/unit/test_serve_node.c checks it.
// usage: node serve-anthropic.mjs BASE_URL API_KEY TOOL_EVENTS.txt [tools]
// (tools: the streamed message offers a tool, and the same chat through /v1/chat/completions is
// fetched for comparison: for a model whose chat format takes tools)
import { readFileSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import { MessageStream } from '@anthropic-ai/sdk/lib/MessageStream';

const [url, key, events, withTools] = process.argv.slice(2);
const client = new Anthropic({ apiKey: key, baseURL: url, maxRetries: 0, timeout: 60000 });
const req = { model: 'm', max_tokens: 7, system: 'Be brief.', messages: [{ role: 'user', content: 'Name a color.' }] };
const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
const out = {};

const m = await client.messages.create(req);
out.whole = { text: textOf(m), stop: m.stop_reason, usage: m.usage, id: m.id, type: m.type };

const tools = [{ name: 'get_weather', description: 'Weather now', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
const s = client.messages.stream(withTools ? { ...req, tools } : req);
let deltas = 0;
s.on('text', () => deltas++);
const f = await s.finalMessage();
out.stream = { text: textOf(f), stop: f.stop_reason, usage: f.usage, deltas };
if (withTools) {
  const r = await fetch(url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + key },
    body: JSON.stringify({
      model: 'm', max_tokens: 7,
      messages: [{ role: 'system', content: req.system }, ...req.messages],
      tools: tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema } })),
    }),
  });
  const j = await r.json();
  out.chat = { status: r.status, text: j.choices?.[0]?.message?.content ?? null, usage: j.usage };
}

out.count = (await client.messages.countTokens({ model: 'm', system: req.system, messages: req.messages })).input_tokens;

try {
  await new Anthropic({ apiKey: 'wrong-key-0000000', baseURL: url, maxRetries: 0 }).messages.create(req);
  out.wrong_key = 200;
} catch (e) {
  out.wrong_key = e.status;
}
try {
  await client.messages.create({ ...req, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] });
  out.bad = 200;
} catch (e) {
  out.bad = e.status;
}

// the stream helper on serve's events for an answer that calls a tool
const sse = readFileSync(events, 'utf8');
const lines = sse.split('\n').filter((l) => l.startsWith('data: {')).map((l) => l.slice(6) + '\n');
const body = new ReadableStream({
  start(c) {
    for (const l of lines) c.enqueue(new TextEncoder().encode(l));
    c.close();
  },
});
const ms = MessageStream.fromReadableStream(body);
let json = null;
ms.on('inputJson', (_d, snapshot) => { json = snapshot; });
const fm = await ms.finalMessage();
out.tool = { content: fm.content, stop: fm.stop_reason, json };
console.log(JSON.stringify(out));
