// Helpers every panel uses: the API (with the key kept in this tab's memory only), element
// building and number formatting.
export const state = { model: null, meta: null, keyRequired: false };

// The API key: a variable of this module, never written to storage.
let apiKey = null;
let keyPrompt = null;  // the pending dialog, shared by requests that need the key at once

function askKey(message) {
  if (keyPrompt) return keyPrompt;
  const dialog = document.getElementById('key-dialog');
  const input = document.getElementById('api-key');
  document.getElementById('key-error').textContent = message || '';
  keyPrompt = new Promise((resolve) => {
    const form = document.getElementById('key-form');
    const done = (e) => {
      e.preventDefault();
      if (!input.value) return;
      apiKey = input.value;
      input.value = '';
      form.removeEventListener('submit', done);
      dialog.close();
      keyPrompt = null;
      resolve();
    };
    form.addEventListener('submit', done);
    // Escape would leave the page without a key; it asks again.
    dialog.addEventListener('cancel', (e) => e.preventDefault(), { once: true });
  });
  dialog.showModal();
  input.focus();
  return keyPrompt;
}

// fetch() against this server, with the key. A 401 asks for the key (again) and retries.
export async function api(path, { method = 'GET', json, body, headers = {}, signal } = {}) {
  if (state.keyRequired && !apiKey) await askKey();
  for (;;) {
    const h = { ...headers };
    if (apiKey) h.Authorization = 'Bearer ' + apiKey;
    if (json !== undefined) {
      h['Content-Type'] = 'application/json';
      body = JSON.stringify(json);
    }
    const r = await fetch(path, { method, headers: h, body, signal });
    if (r.status !== 401) return r;
    apiKey = null;
    await askKey('That key was refused.');
  }
}

// The JSON of a response, or an Error carrying the server's message.
export async function apiJson(path, opts) {
  const r = await api(path, opts);
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(j.error?.message || `HTTP ${r.status}`);
  return j;
}

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) e.append(c);
  }
  return e;
}

export function fmtBytes(n) {
  if (!(n > 0)) return '0 B';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  const i = Math.min(u.length - 1, Math.floor(Math.log(n) / Math.log(1024)));
  return (n / 1024 ** i).toFixed(i ? 1 : 0) + ' ' + u[i];
}

export function fmtMs(ms) {
  if (ms === undefined || ms === null || Number.isNaN(ms)) return '-';
  return ms < 10 ? ms.toFixed(2) + ' ms' : ms < 1000 ? ms.toFixed(1) + ' ms' : (ms / 1000).toFixed(2) + ' s';
}

