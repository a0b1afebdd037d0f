// responses-openai.mjs: the official OpenAI client's Responses API (`responses.create`, streamed
// and not, and `responses.stream`) against `moestream serve`, with a follow-up by
// previous_response_id. Prints one JSON object with what it got; tests/unit/test_serve_node.c
// checks it. usage: node responses-openai.mjs BASE_URL API_KEY
import OpenAI from 'openai';

const [url, key] = process.argv.slice(2);
const client = new OpenAI({ apiKey: key, baseURL: url + '/v1', maxRetries: 0, timeout: 60000 });
const req = { model: 'm', instructions: 'Be brief.', input: 'Name a color.', max_output_tokens: 7 };
const out = {};

const r = await client.responses.create(req);
out.whole = { text: r.output_text, status: r.status, usage: r.usage, id: r.id };

let deltas = 0, text = '';
const s = await client.responses.create({ ...req, stream: true });
for await (const e of s) {
  if (e.type === 'response.output_text.delta') { deltas++; text += e.delta; }
  if (e.type === 'response.completed' || e.type === 'response.incomplete')
    out.streamed_final = e.response.output.filter((i) => i.type === 'message')
      .flatMap((i) => i.content).filter((c) => c.type === 'output_text').map((c) => c.text).join('');
}
out.streamed = { text, deltas };

const h = client.responses.stream(req);
const f = await h.finalResponse();
out.helper = { text: f.output_text, status: f.status };

const next = await client.responses.create({ model: 'm', previous_response_id: r.id, input: 'Another.', max_output_tokens: 3 });
out.follow = { status: next.status, prev: next.previous_response_id, input_tokens: next.usage.input_tokens };
try {
  await client.responses.create({ model: 'm', previous_response_id: 'resp_unknown', input: 'x' });
  out.unknown = 200;
} catch (e) {
  out.unknown = e.status;
}
console.log(JSON.stringify(out));
