// The chat page: conversations kept in this browser (localStorage), answers streamed from the
// server's /v1/chat/completions (the same API as every client), reasoning folded, tool calls
// shown, a stop button, the sampling settings, and the API key asked for when the server wants one.
'use strict';

const $ = (id) => document.getElementById(id);
const store = {
  get(k, d) { try { const v = localStorage.getItem('moestream.' + k); return v === null ? d : JSON.parse(v); } catch { return d; } },
  set(k, v) { try { localStorage.setItem('moestream.' + k, JSON.stringify(v)); } catch { /* full or disabled: kept for this page only */ } },
};

let chats = store.get('chats', []);          // [{id, title, messages: [{role, content, reasoning, calls, end}]}]
let current = store.get('current', null);
let apiKey = store.get('key', '');
let model = 'moestream';
let running = null;                          // the AbortController of the answer being streamed

function save() { store.set('chats', chats); store.set('current', current); }
function chat() { return chats.find((c) => c.id === current); }
function status(t) { $('status').textContent = t; }

function headers() {
  const h = { 'content-type': 'application/json' };
  if (apiKey) h.authorization = 'Bearer ' + apiKey;
  return h;
}

// The key dialog; resolves when it closes (true: a key was given).
function askKey() {
  return new Promise((resolve) => {
    const d = $('key-dialog');
    $('key-input').value = apiKey;
    d.onclose = () => {
      // back to the message box (focus given again: the one the dialog restores may not take keys)
      $('input').blur();
      $('input').focus();
      if (d.returnValue === 'ok') { apiKey = $('key-input').value.trim(); store.set('key', apiKey); resolve(true); }
      else resolve(false);
    };
    d.showModal();
    $('key-input').focus();
  });
}

async function loadModel() {
  try {
    if (!apiKey) { // a server with --api-key says so in /health (public): ask before a request fails
      const h = await fetch('/health').then((r) => r.json()).catch(() => ({}));
      if (h.api_key === 'required') { status('this server needs an API key'); if (await askKey()) return loadModel(); return; }
    }
    const r = await fetch('/v1/models', { headers: headers() });
    if (r.status === 401) { status('this server needs an API key'); if (await askKey()) return loadModel(); return; }
    const j = await r.json();
    model = j.data && j.data[0] ? j.data[0].id : 'moestream';
    $('model').textContent = model;
    document.title = model + ' - moestream';
    status('');
  } catch (e) {
    status('the server did not answer');
  }
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// One message's element; the assistant's has a folded reasoning block, its text, its calls.
function messageView(m) {
  const box = el('article', 'msg ' + m.role);
  box.appendChild(el('div', 'who', m.role === 'user' ? 'You' : m.role === 'error' ? 'Error' : m.model || model));
  if (m.role === 'assistant') {
    const r = el('details', 'reasoning');
    r.appendChild(el('summary', '', 'Reasoning'));
    r.appendChild(el('div', 'rtext', m.reasoning || ''));
    r.hidden = !m.reasoning;
    box.appendChild(r);
  }
  box.appendChild(el('div', 'text', m.content || ''));
  if (m.calls) for (const c of m.calls) box.appendChild(el('div', 'call', 'calls ' + c.name + '(' + c.arguments + ')'));
  if (m.end) box.appendChild(el('div', 'end', m.end));
  return box;
}

function render() {
  const list = $('chats');
  list.textContent = '';
  for (const c of chats) {
    const li = el('li', c.id === current ? 'current' : '');
    const open = el('button', 'open', c.title || 'New chat');
    open.type = 'button';
    open.onclick = () => { current = c.id; save(); render(); $('side').classList.remove('open'); $('input').focus(); };
    const del = el('button', 'del', '\u00d7');
    del.type = 'button';
    del.setAttribute('aria-label', 'Delete ' + (c.title || 'this chat'));
    del.onclick = () => { chats = chats.filter((x) => x.id !== c.id); if (current === c.id) current = chats[0] ? chats[0].id : null; save(); render(); };
    li.append(open, del);
    list.appendChild(li);
  }
  const log = $('log');
  log.textContent = '';
  const c = chat();
  if (c) for (const m of c.messages) log.appendChild(messageView(m));
  log.scrollTop = log.scrollHeight;
}

function newChat() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: '', messages: [] };
  chats.unshift(c);
  current = c.id;
  save();
  render();
  $('input').focus();
}

function settings() {
  const num = (id) => { const v = parseFloat($(id).value); return Number.isFinite(v) ? v : undefined; };
  return { temperature: num('temperature'), top_p: num('top_p'), max_tokens: Math.max(1, Math.round(num('max_tokens') || 512)), system: $('system').value };
}

// Reads the server-sent events of a streamed chat completion, calling each(chunk) per event.
async function readEvents(body, each) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of ev.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') return;
        each(JSON.parse(data));
      }
    }
  }
}

async function send(text) {
  if (!current) newChat();
  const c = chat();
  c.messages.push({ role: 'user', content: text });
  if (!c.title) c.title = text.slice(0, 40);
  const s = settings();
  const msgs = [];
  if (s.system) msgs.push({ role: 'system', content: s.system });
  for (const m of c.messages) if (m.role === 'user' || m.role === 'assistant') msgs.push({ role: m.role, content: m.content || '' });
  const a = { role: 'assistant', model, content: '', reasoning: '', calls: [], end: '' };
  c.messages.push(a);
  save();
  render();
  const view = $('log').lastElementChild;
  const textEl = view.querySelector('.text'), reasonEl = view.querySelector('.reasoning'), rtext = view.querySelector('.rtext');
  running = new AbortController();
  $('send').hidden = true;
  $('stop').hidden = false;
  status('answering');
  const t0 = performance.now();
  let tokens = 0;
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), signal: running.signal,
      body: JSON.stringify({ model, messages: msgs, stream: true, temperature: s.temperature, top_p: s.top_p, max_tokens: s.max_tokens }),
    });
    if (r.status === 401) {
      c.messages.pop();
      c.messages.pop();
      save();
      render();
      if (await askKey()) return send(text);
      return;
    }
    if (!r.ok) {
      const j = await r.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || 'HTTP ' + r.status);
    }
    await readEvents(r.body, (chunk) => {
      const ch = chunk.choices && chunk.choices[0];
      if (!ch) return;
      const d = ch.delta || {};
      if (d.reasoning_content) { a.reasoning += d.reasoning_content; rtext.textContent = a.reasoning; reasonEl.hidden = false; }
      if (d.content) { a.content += d.content; textEl.textContent = a.content; tokens++; }
      if (d.tool_calls) for (const tc of d.tool_calls) {
        const k = tc.index || 0;
        a.calls[k] = a.calls[k] || { name: '', arguments: '' };
        if (tc.function && tc.function.name) a.calls[k].name += tc.function.name;
        if (tc.function && tc.function.arguments) a.calls[k].arguments += tc.function.arguments;
      }
      if (ch.finish_reason) a.end = ch.finish_reason === 'length' ? 'cut at the token limit' : '';
      $('log').scrollTop = $('log').scrollHeight;
    });
    const secs = (performance.now() - t0) / 1000;
    status(tokens ? tokens + ' pieces in ' + secs.toFixed(1) + ' s' : '');
  } catch (e) {
    if (e.name === 'AbortError') { a.end = 'stopped'; status('stopped'); }
    else { c.messages.push({ role: 'error', content: String(e.message || e) }); status('error'); }
  } finally {
    running = null;
    $('send').hidden = false;
    $('stop').hidden = true;
    save();
    render();
    $('input').focus();
  }
}

function stop() { if (running) running.abort(); }

$('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const t = $('input').value.trim();
  if (!t || running) return;
  $('input').value = '';
  send(t);
});
$('input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); $('composer').requestSubmit(); }
});
document.addEventListener('keydown', (ev) => { if (ev.key === 'Escape' && running) { ev.preventDefault(); stop(); } });
$('stop').onclick = stop;
$('new-chat').onclick = newChat;
$('open-side').onclick = () => { $('side').classList.add('open'); $('new-chat').focus(); };
$('close-side').onclick = () => { $('side').classList.remove('open'); $('open-side').focus(); };
$('key-button').onclick = () => askKey().then(loadModel);
$('theme').onclick = () => {
  const dark = document.documentElement.dataset.theme ? document.documentElement.dataset.theme === 'dark'
    : matchMedia('(prefers-color-scheme: dark)').matches;
  document.documentElement.dataset.theme = dark ? 'light' : 'dark';
  store.set('theme', document.documentElement.dataset.theme);
};
const theme = store.get('theme', '');
if (theme) document.documentElement.dataset.theme = theme;
render();
loadModel();
$('input').focus();
