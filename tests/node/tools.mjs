// tools.mjs: forced tool calls through every client, on a model whose chat format takes tools: the
// openai client's tool_choice "required" and a named function (chat completions, strict tool) and
// "required" on the Responses API, the AI SDK's toolChoice 'required', LangChain's bindTools with
// tool_choice "any", the Anthropic client's tool_choice {type: "any"}. Prints one JSON object with
// each one's call {name, args} (or error); tests/unit/test_serve_node.c checks them.
// usage: node tools.mjs BASE_URL API_KEY
import { generateText, jsonSchema, tool } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
const [url, key] = process.argv.slice(2);
const out = {};
async function attempt(name, f) { try { out[name] = await f(); } catch (e) { out[name + '_error'] = String(e?.message ?? e).slice(0, 400) + (e?.responseBody ? ' ' + e.responseBody : ''); } }
const params = { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } }, required: ['city', 'unit'], additionalProperties: false };
const prompt = 'What is the weather in Paris?';
const client = new OpenAI({ apiKey: key, baseURL: url + '/v1', maxRetries: 0 });
const fn = { type: 'function', function: { name: 'get_weather', description: 'Weather now', parameters: params, strict: true } };
const add = { type: 'function', function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] }, strict: true } };
const callOf = (m) => ({ name: m.tool_calls?.[0]?.function?.name, args: m.tool_calls?.[0]?.function?.arguments, finish: undefined });
await attempt('openai_required', async () => { const c = (await client.chat.completions.create({ model: 'm', max_tokens: 200, messages: [{ role: 'user', content: prompt }], tools: [fn, add], tool_choice: 'required' })).choices[0]; return { ...callOf(c.message), finish: c.finish_reason }; });
await attempt('openai_named', async () => { const c = (await client.chat.completions.create({ model: 'm', max_tokens: 200, messages: [{ role: 'user', content: prompt }], tools: [fn, add], tool_choice: { type: 'function', function: { name: 'add' } } })).choices[0]; return { ...callOf(c.message), finish: c.finish_reason }; });
await attempt('openai_none', async () => { const c = (await client.chat.completions.create({ model: 'm', max_tokens: 40, messages: [{ role: 'user', content: prompt }], tools: [fn, add], tool_choice: 'none' })).choices[0]; return { calls: c.message.tool_calls?.length ?? 0, finish: c.finish_reason }; });
await attempt('openai_responses_required', async () => {
  const r = await client.responses.create({ model: 'm', max_output_tokens: 200, input: prompt, tools: [{ type: 'function', name: 'get_weather', parameters: params, strict: true }], tool_choice: 'required' });
  const it = r.output.find((o) => o.type === 'function_call');
  return { name: it?.name, args: it?.arguments, finish: r.status };
});
const provider = createOpenAI({ baseURL: url + '/v1', apiKey: key });
await attempt('ai_required', async () => {
  const r = await generateText({ model: provider.chat('m'), prompt, maxOutputTokens: 200, toolChoice: 'required', tools: { get_weather: tool({ description: 'Weather now', inputSchema: jsonSchema(params), strict: true }) } });
  return { name: r.toolCalls[0]?.toolName, args: JSON.stringify(r.toolCalls[0]?.input), finish: r.finishReason };
});
await attempt('lc_any', async () => {
  const m = new ChatOpenAI({ model: 'm', apiKey: key, configuration: { baseURL: url + '/v1' }, maxTokens: 200 }).bindTools([fn], { tool_choice: 'any' });
  const r = await m.invoke(prompt);
  return { name: r.tool_calls?.[0]?.name, args: JSON.stringify(r.tool_calls?.[0]?.args), finish: r.response_metadata?.finish_reason };
});
await attempt('anthropic_any', async () => {
  const a = new Anthropic({ apiKey: key, baseURL: url, maxRetries: 0, timeout: 60000 });
  const m = await a.messages.create({ model: 'm', max_tokens: 200, messages: [{ role: 'user', content: prompt }], tools: [{ name: 'get_weather', input_schema: params }], tool_choice: { type: 'any' } });
  const b = m.content.find((x) => x.type === 'tool_use');
  return { name: b?.name, args: JSON.stringify(b?.input), finish: m.stop_reason };
});
console.log(JSON.stringify(out));
