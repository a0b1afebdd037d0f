// tool-stream.mjs: the openai client's stream helper (ChatCompletionStream, what `.stream()` runs)
// on the SSE events serve sends for an answer that ends with a tool call; prints what it saw.
// usage: node tool-stream.mjs EVENTS.txt
import { readFileSync } from 'node:fs';
import { ChatCompletionStream } from 'openai/lib/ChatCompletionStream';

const sse = readFileSync(process.argv[2], 'utf8');
const lines = sse.split('\n').filter((l) => l.startsWith('data: {')).map((l) => l.slice(6) + '\n');
const body = new ReadableStream({
  start(c) {
    for (const l of lines) c.enqueue(new TextEncoder().encode(l));
    c.close();
  },
});
const out = { done: [], deltas: 0 };
const s = ChatCompletionStream.fromReadableStream(body);
s.on('tool_calls.function.arguments.delta', () => out.deltas++);
s.on('tool_calls.function.arguments.done', (e) => out.done.push({ name: e.name, arguments: e.arguments }));
const c = await s.finalChatCompletion();
out.finish = c.choices[0].finish_reason;
out.calls = c.choices[0].message.tool_calls;
console.log(JSON.stringify(out));
