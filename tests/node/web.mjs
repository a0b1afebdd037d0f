// web.mjs: the chat page of `moestream serve` in a real browser (Debian's chromium, headless,
// driven by puppeteer-core): it asks for the API key, a typed message gets an answer that grows
// token by token, a long answer is stopped mid-way, the conversation survives a reload (kept in
// the browser), it is usable at 320 px, and nothing is written to the console as an error.
// Prints one JSON object; tests/unit/test_serve_web.c checks it.
// usage: node web.mjs BASE_URL API_KEY SCREENSHOT_DIR [CHROMIUM]
import puppeteer from 'puppeteer-core';

const [url, key, shots, chromium = '/usr/bin/chromium'] = process.argv.slice(2);
const out = { console_errors: [], page_errors: [] };
const browser = await puppeteer.launch({
  executablePath: chromium, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check'],
});
try {
  const page = await browser.newPage();
  page.on('console', (m) => { if (m.type() === 'error') out.console_errors.push(m.text()); });
  page.on('pageerror', (e) => out.page_errors.push(String(e)));
  await page.setViewport({ width: 1100, height: 760 });
  await page.goto(url + '/', { waitUntil: 'load' });
  // the server has a key: the page asks for it
  await page.waitForSelector('#key-dialog[open]', { timeout: 10000 });
  out.asked_key = true;
  await page.type('#key-input', key);
  await page.click('#key-ok');
  await page.waitForFunction(() => document.getElementById('model').textContent !== 'moestream', { timeout: 10000 });
  out.model = await page.$eval('#model', (e) => e.textContent);

  // the engine view, open before the first message: its figures and heatmap change with it
  await page.click('#engine-button');
  await page.waitForFunction(() => document.querySelectorAll('#budget-bar span').length > 0, { timeout: 10000 });
  const figures = () => page.$$eval('#figures dd', (d) => d.map((x) => x.textContent));
  out.engine_before = await figures();
  out.budget_parts = await page.$$eval('#budget-bar span', (s) => s.length);
  out.budget_width = await page.$$eval('#budget-bar span', (s) => s.reduce((a, x) => a + parseFloat(x.style.width), 0));

  // a message, answered token by token: the answer's text seen growing
  await page.$eval('#max_tokens', (e) => { e.value = '24'; });
  await page.$eval('#temperature', (e) => { e.value = '0'; });
  // every length the answer's text takes on the way, seen by a MutationObserver (not by polling)
  await page.evaluate(() => {
    window.__lengths = new Set();
    new MutationObserver(() => {
      const a = [...document.querySelectorAll('.msg.assistant .text')].pop();
      if (a) window.__lengths.add(a.textContent.length);
    }).observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true });
  });
  // the tiny model answers in well under a second: the network slowed (700 B/s down: 3 or 4 events
  // a second, so that a loaded machine's browser does not take several in one read) so that its
  // events arrive apart, as a real model's do (and the next answer is still arriving at Stop)
  await page.emulateNetworkConditions({ offline: false, download: 700, upload: 1e6, latency: 0 });
  await page.focus('#input');
  await page.keyboard.type('Name a color.');
  await page.keyboard.press('Enter');
  out.step = 'first answer';
  await page.waitForFunction(() => document.getElementById('stop').hidden && document.querySelectorAll('.msg.assistant').length === 1 &&
    [...document.querySelectorAll('.msg.assistant .text')].pop().textContent.length > 0, { timeout: 60000 });
  out.growth_steps = await page.evaluate(() => [...window.__lengths].filter((n) => n > 0).length);
  out.answer = await page.$$eval('.msg.assistant .text', (a) => a[a.length - 1].textContent);
  await new Promise((r) => setTimeout(r, 3500)); // looks of the engine view after the answer
  out.engine_after = await figures();
  out.heatmap_cells = await page.evaluate(() => {
    const c = document.getElementById('heatmap'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
    return n;
  });
  await page.screenshot({ path: shots + '/page-desktop.png' });
  out.step = 'engine view closed';
  await page.click('#engine-button'); // closed again for the rest

  // a long answer, stopped mid-way (the Stop button)
  out.step = 'stop';
  await page.$eval('#max_tokens', (e) => { e.value = '400'; });
  await page.$eval('#temperature', (e) => { e.value = '1'; });
  await page.focus('#input');
  await page.keyboard.type('Tell me a long story.');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => {
    const a = [...document.querySelectorAll('.msg.assistant .text')].pop();
    return a && a.textContent.length > 0 && document.querySelectorAll('.msg.assistant').length === 2;
  }, { timeout: 60000 });
  await page.click('#stop');
  await page.waitForFunction(() => document.getElementById('stop').hidden, { timeout: 20000 });
  out.stopped = await page.$$eval('.msg.assistant .end', (e) => e.map((x) => x.textContent));
  out.stopped_len = await page.$$eval('.msg.assistant .text', (a) => a[a.length - 1].textContent.length);
  await page.emulateNetworkConditions(null);

  out.step = 'reload';
  // kept in the browser: a reload shows the same conversation
  await page.reload({ waitUntil: 'load' });
  await page.waitForFunction(() => document.querySelectorAll('.msg').length >= 4, { timeout: 10000 });
  out.after_reload = await page.$$eval('.msg', (m) => m.length);
  // the heatmap after the reload: still this conversation's experts (its mark kept), not a new start
  await page.click('#engine-button');
  await page.waitForFunction(() => /conversation/.test(document.getElementById('since').textContent), { timeout: 10000 });
  out.since_after_reload = await page.$eval('#since', (e) => e.textContent);
  out.heatmap_after_reload = await page.evaluate(() => {
    const c = document.getElementById('heatmap'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
    return n;
  });
  await page.click('#engine-button');

  // 320 px: the list behind its button, the composer within the width
  await page.setViewport({ width: 320, height: 640 });
  await new Promise((r) => setTimeout(r, 400)); // the list's slide out
  out.narrow = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth, side_hidden: getComputedStyle(document.getElementById('side')).transform !== 'none',
    send_right: document.getElementById('send').getBoundingClientRect().right,
  }));
  await page.screenshot({ path: shots + '/page-narrow.png' });
  // dark: the toggle
  await page.setViewport({ width: 1100, height: 760 });
  await page.click('#theme');
  out.theme = await page.evaluate(() => document.documentElement.dataset.theme);
} catch (e) {
  out.error = String(e && e.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
