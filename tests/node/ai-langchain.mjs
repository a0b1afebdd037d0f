// ai-langchain.mjs: the Vercel AI SDK (`ai` with `@ai-sdk/openai`: its default model, which calls
// /v1/responses, streamed and not, and its chat model) and LangChain JS (`ChatOpenAI` with and
// without useResponsesApi, and the completions class `OpenAI`, which sends prompt arrays) against
// `moestream serve`. Prints one JSON object with what each got (an error's message instead);
// tests/unit/test_serve_node.c checks it. usage: node ai-langchain.mjs BASE_URL API_KEY
import { generateText, streamText } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI, OpenAI as CompletionsOpenAI } from '@langchain/openai';

const [url, key] = process.argv.slice(2);
const out = {};
const system = 'Be brief.', prompt = 'Name a color.';
async function attempt(name, f) {
  try {
    out[name] = await f();
  } catch (e) {
    out[name + '_error'] = String(e?.message ?? e).slice(0, 600) + (e?.responseBody ? ' ' + e.responseBody : '');
  }
}
const provider = createOpenAI({ baseURL: url + '/v1', apiKey: key });
await attempt('ai_responses', async () => (await generateText({ model: provider('m'), system, prompt, maxOutputTokens: 7 })).text);
await attempt('ai_responses_stream', async () => {
  let t = '';
  for await (const p of streamText({ model: provider('m'), system, prompt, maxOutputTokens: 7 }).textStream) t += p;
  return t;
});
await attempt('ai_chat', async () => (await generateText({ model: provider.chat('m'), system, prompt, maxOutputTokens: 7 })).text);
const lc = (extra) => new ChatOpenAI({ model: 'm', apiKey: key, configuration: { baseURL: url + '/v1' }, maxTokens: 7, ...extra });
const text = (m) => (typeof m.content === 'string' ? m.content : m.content.map((c) => c.text ?? '').join(''));
await attempt('lc_responses', async () => text(await lc({ useResponsesApi: true }).invoke([['system', system], ['human', prompt]])));
await attempt('lc_chat', async () => text(await lc({}).invoke([['system', system], ['human', prompt]])));
await attempt('lc_completions', async () =>
  new CompletionsOpenAI({ model: 'm', apiKey: key, configuration: { baseURL: url + '/v1' }, maxTokens: 6 }).invoke('The weather today is'));
console.log(JSON.stringify(out));
