// structured.mjs: structured outputs through every client: the AI SDK's generateObject (its default
// model on /v1/responses and its chat model), LangChain's withStructuredOutput (jsonSchema method), the
// openai client's chat.completions.parse and responses.parse, all with one JSON Schema. Prints one JSON
// object with each one's object (or error); tests/unit/test_serve_node.c checks them.
// usage: node structured.mjs BASE_URL API_KEY
import { generateObject, jsonSchema } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import OpenAI from 'openai';
const [url, key] = process.argv.slice(2);
const out = {};
async function attempt(name, f) { try { out[name] = await f(); } catch (e) { out[name + '_error'] = String(e?.message ?? e).slice(0, 400) + (e?.responseBody ? ' ' + e.responseBody : ''); } }
const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 12 }, age: { type: 'integer' }, tags: { type: 'array', items: { type: 'string', enum: ['a', 'b'] }, maxItems: 3 } }, required: ['name', 'age', 'tags'], additionalProperties: false };
const provider = createOpenAI({ baseURL: url + '/v1', apiKey: key });
await attempt('ai_object', async () => (await generateObject({ model: provider('m'), schema: jsonSchema(schema), prompt: 'Give me a person.', maxOutputTokens: 200 })).object);
await attempt('ai_object_chat', async () => (await generateObject({ model: provider.chat('m'), schema: jsonSchema(schema), prompt: 'Give me a person.', maxOutputTokens: 200 })).object);
await attempt('lc_structured', async () => await new ChatOpenAI({ model: 'm', apiKey: key, configuration: { baseURL: url + '/v1' }, maxTokens: 200 }).withStructuredOutput(schema, { name: 'person', method: 'jsonSchema' }).invoke('Give me a person.'));
const client = new OpenAI({ apiKey: key, baseURL: url + '/v1', maxRetries: 0 });
await attempt('openai_parse', async () => (await client.chat.completions.parse({ model: 'm', max_tokens: 200, messages: [{ role: 'user', content: 'Give me a person.' }], response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema } } })).choices[0].message.parsed);
await attempt('openai_responses_parse', async () => (await client.responses.parse({ model: 'm', max_output_tokens: 200, input: 'Give me a person.', text: { format: { type: 'json_schema', name: 'person', strict: true, schema } } })).output_parsed);
console.log(JSON.stringify(out));
