// The Savings panel: what caching saves on this server's model, measured on request by
// POST /v1/bench/savings (the same measurements as `promptcache bench --plot`): generation with
// and without the KV cache, time to first token cold / prefix hit / schema modules, and K/V
// bytes per token by KV type.
import { apiJson, el, fmtBytes } from './util.js';
import { xyChart, barChart } from './svg.js';

function chart(title, note, svgNode) {
  return el('div', { class: 'chart' }, el('h3', { text: title }), svgNode,
            el('p', { class: 'muted', text: note }));
}

const ms = (v) => `${+v.toPrecision(3)} ms`;

export function renderSavings(j) {
  const css = getComputedStyle(document.documentElement);
  const color = (v) => css.getPropertyValue(v).trim() || '#888';
  const gen = j.generation, ttft = j.ttft;
  const last = gen[gen.length - 1];
  const hit = ttft[ttft.length - 1];
  document.getElementById('savings-charts').replaceChildren(
      chart('Generation: with vs without the KV cache',
            `${last.tokens} tokens: ${ms(last.with_cache_ms)} with the cache, ` +
            `${ms(last.no_cache_ms)} recomputing every step`,
            xyChart([
              { name: 'no KV cache', color: color('--computed'),
                points: gen.map((r) => [r.tokens, r.no_cache_ms]) },
              { name: 'with KV cache', color: color('--ram'),
                points: gen.map((r) => [r.tokens, r.with_cache_ms]) },
            ], { xLabel: 'tokens generated', format: ms, label: 'generation time against length' })),
      chart('Time to first token',
            `${hit.prompt_tokens} tokens: cold ${ms(hit.cold_ms)}, prefix hit ` +
            `${ms(hit.prefix_hit_ms)}, modules ${ms(hit.modules_ms)} (medians)`,
            xyChart([
              { name: 'cold', color: color('--computed'),
                points: ttft.map((r) => [r.prompt_tokens, r.cold_ms]) },
              { name: 'prefix hit', color: color('--ram'),
                points: ttft.map((r) => [r.prompt_tokens, r.prefix_hit_ms]) },
              { name: 'schema modules', color: color('--module'),
                points: ttft.map((r) => [r.modules_prompt_tokens, r.modules_ms]) },
            ], { xLabel: 'prompt tokens', format: ms, label: 'time to first token against prompt length' })),
      chart('K/V bytes per token by KV type', `this server stores ${j.kv_type}`,
            barChart(Object.entries(j.kv_bytes_per_token).map(([k, v]) => ({ label: k, value: v })),
                     { color: color('--accent'), label: 'K/V bytes per token by KV type' })));
  document.getElementById('savings-charts').dataset.points = String(gen.length + ttft.length);
}

async function measure() {
  const status = document.getElementById('savings-status');
  const button = document.getElementById('savings-run');
  button.disabled = true;
  status.textContent = 'measuring (requests wait meanwhile)...';
  try {
    const j = await apiJson('/v1/bench/savings', { method: 'POST', json: {
      max_tokens: Number(document.getElementById('savings-tokens').value),
      max_prompt: Number(document.getElementById('savings-prompt').value) } });
    renderSavings(j);
    status.textContent = `measured at ${new Date().toLocaleTimeString()}; ` +
        `${fmtBytes(j.kv_bytes_per_token[j.kv_type])}/token K/V`;
  } catch (e) {
    status.textContent = 'failed: ' + e.message;
  } finally {
    button.disabled = false;
  }
}

export function initSavings() {
  document.getElementById('savings-run').addEventListener('click', measure);
}
