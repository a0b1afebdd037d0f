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
    open.onclick = () => {
      current = c.id; save(); render(); $('side').classList.remove('open'); $('input').focus();
      const m = view.last && chatMark(view.last);
      if (m) { view.mark = m; $('since').textContent = '(' + m.label + ')'; drawHeatmap(view.last.experts); }
    };
    const del = el('button', 'del', '\u00d7');
    del.type = 'button';
    del.setAttribute('aria-label', 'Delete ' + (c.title || 'this chat'));
    del.onclick = () => {
      chats = chats.filter((x) => x.id !== c.id); if (current === c.id) current = chats[0] ? chats[0].id : null;
      save(); saveMarks(); render();
    };
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
  // the heatmap: this conversation's experts since its first answer (kept with the conversations
  // while the same server runs)
  if (view.last) {
    if (!view.marks[c.id]) { view.marks[c.id] = markOf(view.last, 'since this conversation began'); saveMarks(); }
    view.mark = view.marks[c.id];
    $('since').textContent = '(' + view.mark.label + ')';
  }
  c.messages.push(a);
  save();
  render();
  const box = $('log').lastElementChild;
  const textEl = box.querySelector('.text'), reasonEl = box.querySelector('.reasoning'), rtext = box.querySelector('.rtext');
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
// ---- the engine view: /api/engine looked at every second while open ----

const PART_COLORS = ['#8d99ae', '#2b6cd6', '#5fa8d3', '#2f8f5b', '#c9a227', '#8a3ffc', '#e07a10', '#b0b7c3'];
// marks: per conversation, the server's counts when its first answer began ({started, label,
// routes, reads}), kept in the browser; a server started since has counted from zero again
let view = { timer: null, prev: null, mark: null, marks: store.get('marks', {}), hist: [] };

// The marks of conversations that still exist, the 8 latest (a layer's counts for each expert:
// the full K3's take some 100 KB each).
function saveMarks() {
  const keep = Object.entries(view.marks).filter(([id]) => chats.some((c) => c.id === id))
    .sort((a, b) => (b[1].at || 0) - (a[1].at || 0)).slice(0, 8);
  view.marks = Object.fromEntries(keep);
  store.set('marks', view.marks);
}

function bytes(n) {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 2 : 1) : String(n)) + ' ' + u[i];
}

function drawBudget(b) {
  const bar = $('budget-bar'), leg = $('budget-legend');
  bar.textContent = '';
  leg.textContent = '';
  if (!b) return;
  const used = b.parts.reduce((a, p) => a + p.bytes, 0), total = Math.max(b.total || used, used);
  $('budget-total').textContent = bytes(total) + (b.total ? '' : ' (no budget: what the plan uses)');
  b.parts.forEach((p, i) => {
    const sp = document.createElement('span');
    sp.style.width = (100 * p.bytes / total) + '%';
    sp.style.background = PART_COLORS[i % PART_COLORS.length];
    sp.title = p.name + ': ' + bytes(p.bytes);
    bar.appendChild(sp);
    const li = document.createElement('li');
    const name = document.createElement('span');
    const sw = document.createElement('i');
    sw.style.background = PART_COLORS[i % PART_COLORS.length];
    name.append(sw, p.name);
    name.title = p.what;
    li.append(name, el('span', '', bytes(p.bytes)));
    leg.appendChild(li);
  });
  const li = document.createElement('li');
  li.append(el('span', '', 'unused'), el('span', '', bytes(total - used)));
  leg.appendChild(li);
  if (b.streamed_trunk_bytes) {
    const s = document.createElement('li');
    s.append(el('span', '', 'streamed trunk (read each pass, not resident)'), el('span', '', bytes(b.streamed_trunk_bytes)));
    leg.appendChild(s);
  }
}

function drawFigures(o, prev) {
  const c = o.counters, p = prev ? prev.counters : null;
  const d = (k) => (p ? c[k] - p[k] : 0);
  const busy = d('busy_seconds'), toks = d('decode_tokens'), rows = d('prefill_rows');
  const hits = d('expert_cache_hits'), misses = d('expert_cache_misses');
  const fig = [
    ['s per generated token', toks > 0 ? (busy / toks).toFixed(3) + ' s' : '-'],
    ['prefill tokens per s', rows > 0 && busy > 0 ? (rows / busy).toFixed(1) : '-'],
    ['trunk read per token', toks > 0 ? bytes(Math.round(d('bytes_read_trunk') / toks)) : '-'],
    ['experts read per token', toks > 0 ? bytes(Math.round(d('bytes_read_experts') / toks)) : '-'],
    ['waiting for reads', busy > 0 ? Math.round(100 * d('io_wait_seconds') / busy) + '%' : '-'],
    ['expert-cache hit rate', hits + misses > 0 ? Math.round(100 * hits / (hits + misses)) + '%' : '-'],
    ['sequences running / queued', o.batch.running + ' / ' + o.batch.queued],
    ['tokens generated in all', String(c.generated_tokens + 0)],
    ['read from disk in all', bytes(c.bytes_read_trunk + c.bytes_read_experts)],
  ];
  if (o.pass.layers) fig.push(['pass', 'layer ' + o.pass.layer + ' of ' + o.pass.layers + ', ' + o.pass.rows + ' rows, ~' + o.pass.seconds_left.toFixed(0) + ' s left']);
  // idle between two looks: the rates of the last activity stay (marked as such)
  const idle = toks === 0 && rows === 0 && hits + misses === 0;
  if (idle && view.rates) for (let i = 0; i < 6; i++) fig[i][1] = view.rates[i];
  else if (!idle) view.rates = fig.slice(0, 6).map((f) => f[1]);
  const dl = $('figures');
  dl.textContent = '';
  for (const [k, v] of fig) dl.append(el('dt', '', k), el('dd', '', v));
  if (p && (toks > 0 || hits + misses > 0)) {
    view.hist.push({ hit: hits + misses > 0 ? hits / (hits + misses) : null, spt: toks > 0 ? busy / toks : null });
    if (view.hist.length > 120) view.hist.shift();
  }
  const cv = $('history'), g = cv.getContext('2d');
  g.clearRect(0, 0, cv.width, cv.height);
  const maxS = Math.max(1e-9, ...view.hist.map((h) => h.spt || 0));
  const line = (key, color, scale) => {
    g.strokeStyle = color;
    g.lineWidth = 2;
    g.beginPath();
    let started = false;
    view.hist.forEach((h, i) => {
      if (h[key] === null) return;
      const x = (i + 0.5) * cv.width / 120, y = cv.height - 4 - (cv.height - 8) * h[key] / scale;
      if (started) g.lineTo(x, y); else { g.moveTo(x, y); started = true; }
      g.fillStyle = color;
      g.fillRect(x - 2, y - 2, 4, 4); // a point alone is seen too
    });
    g.stroke();
  };
  line('hit', '#2f8f5b', 1);
  line('spt', '#c2570c', maxS);
  const w = $('workers');
  w.textContent = o.workers.listed ? 'Workers: ' + o.workers.up + ' of ' + o.workers.listed + ' answering; ' +
    o.workers.requests + ' requests, ' + o.workers.resends + ' sent again, ' + o.workers.failovers + ' failed over' : 'Experts run in this process.';
  if (o.workers.list && o.workers.list.length) {
    const ul = el('ul', 'worker-list');
    for (const x of o.workers.list) {
      const ms = x.replies ? ', ' + (1000 * x.reply_seconds / x.replies).toFixed(1) + ' ms a reply' : '';
      const li = el('li', 'w-' + x.state, x.endpoint + ': ' + x.state + ', ' + x.requests + ' requests' + ms +
        (x.why ? ' (' + x.why + ')' : ''));
      ul.appendChild(li);
    }
    w.appendChild(ul);
  }
}

// One cell per expert of each layer: its rows since the mark; blue when the cache served it,
// orange when it was read from disk (more orange: a larger share of reads), purple from a worker.
function drawHeatmap(ex) {
  const cv = $('heatmap'), g = cv.getContext('2d');
  const L = ex.layers.length, E = ex.experts;
  if (!L || !E) return;
  const cols = Math.min(E, 128), rowsPer = Math.ceil(E / cols);
  cv.width = cols * 3;
  cv.height = Math.max(1, L * rowsPer * 3);
  g.clearRect(0, 0, cv.width, cv.height);
  const mark = view.mark;
  let most = 1;
  const cells = ex.layers.map((l, li) => l.routes.map((r, e) => {
    const r0 = mark ? mark.routes[li][e] : 0, d0 = mark && l.reads ? mark.reads[li][e] : 0;
    const routes = r - r0, reads = l.reads ? l.reads[e] - d0 : 0;
    if (routes > most) most = routes;
    return { routes, reads };
  }));
  cells.forEach((row, li) => row.forEach((c, e) => {
    if (!c.routes) return;
    const a = 0.25 + 0.75 * Math.sqrt(c.routes / most);
    let col;
    if (ex.source === 'workers') col = '138,63,252';
    else if (c.reads > 0) col = '224,122,16';
    else col = '43,108,214';
    g.fillStyle = 'rgba(' + col + ',' + a.toFixed(3) + ')';
    const x = (e % cols) * 3, y = (li * rowsPer + Math.floor(e / cols)) * 3;
    g.fillRect(x, y, 3, 3);
  }));
}

function markOf(o, label) {
  return { label, started: o.started, at: Date.now(), routes: o.experts.layers.map((l) => l.routes.slice()),
    reads: o.experts.layers.map((l) => (l.reads ? l.reads.slice() : null)) };
}

// The current conversation's mark where this server made it.
function chatMark(o) {
  const m = current && view.marks[current];
  return m && m.started === o.started && m.routes.length === o.experts.layers.length ? m : null;
}

function setMark(o) {
  view.mark = markOf(o, 'since ' + new Date().toLocaleTimeString());
  $('since').textContent = '(' + view.mark.label + ')';
}

async function look() {
  try {
    const r = await fetch('/api/engine', { headers: headers() });
    if (!r.ok) return;
    const o = await r.json();
    if (!view.mark || view.mark.started !== o.started) {
      const m = chatMark(o);
      if (m) { view.mark = m; $('since').textContent = '(' + m.label + ')'; } else setMark(o);
    }
    drawBudget(o.budget);
    drawFigures(o, view.prev);
    drawHeatmap(o.experts);
    view.prev = o;
    view.last = o;
  } catch { /* the next look tries again */ }
}

function toggleEngine() {
  const open = $('engine').hidden;
  $('engine').hidden = !open;
  $('engine-button').setAttribute('aria-expanded', String(open));
  clearInterval(view.timer);
  view.timer = null;
  if (open) { look(); view.timer = setInterval(look, 1000); }
}

$('engine-button').onclick = toggleEngine;
$('since-reset').onclick = () => { if (view.last) { setMark(view.last); drawHeatmap(view.last.experts); } };

const theme = store.get('theme', '');
if (theme) document.documentElement.dataset.theme = theme;
render();
loadModel();
$('input').focus();
