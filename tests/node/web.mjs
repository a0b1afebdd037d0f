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

  // a message, answered token by token: the answer's text seen growing
  await page.$eval('#max_tokens', (e) => { e.value = '24'; });
  await page.$eval('#temperature', (e) => { e.value = '0'; });
  await page.focus('#input');
  await page.keyboard.type('Name a color.');
  await page.keyboard.press('Enter');
  const lengths = new Set();
  const t0 = Date.now();
  for (;;) {
    const s = await page.evaluate(() => {
      const a = [...document.querySelectorAll('.msg.assistant .text')].pop();
      return { len: a ? a.textContent.length : 0, running: !document.getElementById('stop').hidden };
    });
    lengths.add(s.len);
    if (!s.running && s.len > 0) break;
    if (Date.now() - t0 > 60000) throw new Error('the answer did not finish in 60 s');
    await new Promise((r) => setTimeout(r, 15));
  }
  out.growth_steps = [...lengths].filter((n) => n > 0).length;
  out.answer = await page.$$eval('.msg.assistant .text', (a) => a[a.length - 1].textContent);
  await page.screenshot({ path: shots + '/page-desktop.png' });

  // a long answer, stopped mid-way (the Stop button)
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

  // kept in the browser: a reload shows the same conversation
  await page.reload({ waitUntil: 'load' });
  await page.waitForFunction(() => document.querySelectorAll('.msg').length >= 4, { timeout: 10000 });
  out.after_reload = await page.$$eval('.msg', (m) => m.length);

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
