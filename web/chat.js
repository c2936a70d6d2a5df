// The chat panel: a conversation streamed from /v1/chat/completions with the system prompt and
// sampling settings beside it; every answer shows its cache map.
import { state, api, el } from './util.js';
import { legend, renderCacheMap } from './cachemap.js';

// Streams a completion (chat or text) as Server-Sent Events. Returns the text, a thinking
// model's reasoning (delta.reasoning_content), the timings, the cache map and the finish reason
// of the last chunk.
export async function streamCompletion(path, body, { onText, onReasoning, signal } = {}) {
  const r = await api(path, { method: 'POST', json: { ...body, stream: true, cache_map: true }, signal });
  if (!r.ok) {
    const j = await r.json().catch(() => ({}));
    throw new Error(j.error?.message || `HTTP ${r.status}`);
  }
  const out = { text: '', reasoning: '', timings: null, cache_map: null, finish_reason: null };
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;  // ": keep-alive" comments
        const data = line.slice(6);
        if (data === '[DONE]') return out;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        const c = j.choices?.[0];
        const piece = c ? (c.delta?.content ?? c.text ?? '') : '';
        if (piece) {
          out.text += piece;
          onText?.(piece, out.text);
        }
        const thought = c?.delta?.reasoning_content;
        if (thought) {
          out.reasoning += thought;
          onReasoning?.(thought, out.reasoning);
        }
        if (c?.finish_reason) out.finish_reason = c.finish_reason;
        if (j.timings) out.timings = j.timings;
        if (j.cache_map) out.cache_map = j.cache_map;
      }
    }
  }
  return out;
}

// The sampling fields of the side panel (empty or invalid inputs are left to the server's
// defaults).
export function samplingSettings() {
  const num = (id) => {
    const v = document.getElementById(id).value;
    return v === '' ? undefined : Number(v);
  };
  const s = { max_tokens: num('max-tokens'), temperature: num('temperature'), top_p: num('top-p'),
              seed: num('seed') };
  const k = num('top-k');
  if (k) s.top_k = k;
  return s;
}

const history = [];  // {role, content} of this conversation
let controller = null;

function addMessage(role, text) {
  const li = el('li', { class: 'msg ' + role },
                el('div', { class: 'role', text: role }), el('div', { class: 'text', text }));
  const list = document.getElementById('messages');
  list.append(li);
  list.scrollTop = list.scrollHeight;
  return li;
}

async function send(e) {
  e?.preventDefault();
  const input = document.getElementById('user-input');
  const content = input.value.trim();
  if (!content || controller) return;
  input.value = '';
  const status = document.getElementById('chat-status');
  const system = document.getElementById('system-prompt').value.trim();
  const messages = [...(system ? [{ role: 'system', content: system }] : []), ...history,
                    { role: 'user', content }];
  addMessage('user', content);
  const li = addMessage('assistant', '');
  const textEl = li.querySelector('.text');
  // A thinking model's reasoning, shown above its answer as it comes.
  const thinkingEl = el('div', { class: 'thinking' });
  thinkingEl.hidden = true;
  textEl.before(thinkingEl);
  controller = new AbortController();
  document.getElementById('send').disabled = true;
  document.getElementById('stop').disabled = false;
  status.textContent = 'generating...';
  try {
    const r = await streamCompletion('/v1/chat/completions',
        { model: state.model, messages, ...samplingSettings() },
        { signal: controller.signal, onText: (_, all) => { textEl.textContent = all; },
          onReasoning: (_, all) => { thinkingEl.hidden = false; thinkingEl.textContent = all; } });
    history.push({ role: 'user', content }, { role: 'assistant', content: r.text,
                                               ...(r.reasoning ? { reasoning_content: r.reasoning } : {}) });
    if (r.cache_map) li.append(renderCacheMap(r.cache_map, r.timings));
    li.dataset.done = '1';
    status.textContent = r.finish_reason ? `finished: ${r.finish_reason}` : '';
  } catch (err) {
    if (err.name === 'AbortError') {
      status.textContent = 'stopped';
    } else {
      li.append(el('p', { class: 'error', text: err.message }));
      status.textContent = 'failed';
    }
    li.dataset.done = '1';
  } finally {
    controller = null;
    document.getElementById('send').disabled = false;
    document.getElementById('stop').disabled = true;
  }
}

export function initChat() {
  document.getElementById('chat-form').addEventListener('submit', send);
  document.getElementById('user-input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) send(e);
  });
  document.getElementById('stop').addEventListener('click', () => controller?.abort());
  document.getElementById('new-chat').addEventListener('click', () => {
    history.length = 0;
    document.getElementById('messages').replaceChildren();
    document.getElementById('chat-status').textContent = '';
  });
  document.getElementById('legend').append(...legend());
  const ctx = state.meta?.context_length;
  if (ctx) document.getElementById('max-tokens').max = ctx;
}
