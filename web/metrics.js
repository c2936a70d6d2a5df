// The live metrics panel: /metrics (Prometheus text) polled each second, the last five minutes
// kept in this tab: hit ratio, cached and computed prompt tokens per second, the TTFT
// histogram, cache bytes in RAM and on disk, requests active and queued; and the fidelity of
// reused modules and segments that --fidelity-sample measures (promptcache_fidelity_*).
import { api, el, fmtBytes } from './util.js';
import { lineChart, barChart } from './svg.js';

const POLL_MS = 1000;
const KEEP = 300;  // samples: five minutes at one a second
const samples = [];  // {t, m: Map(name{labels} -> value)}

export function parsePrometheus(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = /^([A-Za-z_:][\w:]*(?:\{[^}]*\})?)\s+(\S+)/.exec(line);
    if (match) m.set(match[1], Number(match[2]));
  }
  return m;
}

const get = (s, k) => s?.m.get(k) ?? 0;

// Per-second rate of a counter between consecutive samples.
function rates(key) {
  const out = [];
  for (let i = 1; i < samples.length; ++i) {
    const dt = (samples[i].t - samples[i - 1].t) / 1000;
    out.push(dt > 0 ? Math.max(0, get(samples[i], key) - get(samples[i - 1], key)) / dt : 0);
  }
  return out;
}

function ttftBuckets(s) {
  const bounds = [];
  for (const [k, v] of s.m) {
    const b = /^promptcache_time_to_first_token_seconds_bucket\{le="([^"]+)"\}$/.exec(k);
    if (b) bounds.push([b[1] === '+Inf' ? Infinity : Number(b[1]), v]);
  }
  bounds.sort((a, b) => a[0] - b[0]);
  let prev = 0;
  return bounds.map(([le, cum]) => {
    const bar = { label: le === Infinity ? '>' : le < 1 ? `${+(le * 1000).toPrecision(3)}ms` : `${le}s`,
                  value: cum - prev };
    prev = cum;
    return bar;
  });
}

function tile(id, label, value) {
  return el('div', { class: 'tile', id }, el('div', { class: 'v', text: value }),
            el('div', { class: 'k', text: label }));
}

const pct = (v) => (100 * v).toFixed(1) + '%';

// One line: the sampled requests' margin-aware top-1 agreement against the full recompute (the
// headline), beside plain top-1 and the first token's KL; or why there is none.
export function fidelityLine(s) {
  const n = get(s, 'promptcache_fidelity_samples_total');
  const dropped = get(s, 'promptcache_fidelity_dropped_total');
  const pending = get(s, 'promptcache_fidelity_pending');
  if (!s?.m.has('promptcache_fidelity_samples_total')) return 'Fidelity: not reported by this server.';
  if (!(n > 0)) {
    return 'Fidelity: no sampled request evaluated yet' +
        (pending > 0 ? ` (${pending} waiting for the server to be idle)` : '') +
        ' (serve with --fidelity-sample N to evaluate one request in N that reused modules or segments).';
  }
  return `Fidelity: ${pct(get(s, 'promptcache_fidelity_top1_margin_aware'))} margin-aware top-1 ` +
      `agreement against the full recompute, over ${n} sampled request${n === 1 ? '' : 's'}` +
      ` (plain top-1 ${pct(get(s, 'promptcache_fidelity_top1'))}, first-token KL ` +
      `${get(s, 'promptcache_fidelity_first_token_kl_mean').toPrecision(3)} nats mean` +
      `${dropped > 0 ? `, ${dropped} dropped` : ''}${pending > 0 ? `, ${pending} waiting` : ''}).`;
}

function chart(title, svgNode) {
  return el('div', { class: 'chart' }, el('h3', { text: title }), svgNode);
}

function render() {
  const s = samples[samples.length - 1];
  if (!s) return;
  const css = getComputedStyle(document.documentElement);
  const color = (v) => css.getPropertyValue(v).trim() || '#888';
  const requests = get(s, 'promptcache_requests_total');
  document.getElementById('metric-tiles').replaceChildren(
      tile('m-requests', 'requests', String(requests)),
      tile('m-hit-ratio', 'prefix hit ratio', (100 * get(s, 'promptcache_cache_hit_ratio')).toFixed(0) + '%'),
      tile('m-cached-ratio', 'prompt tokens cached', (100 * get(s, 'promptcache_cached_token_ratio')).toFixed(0) + '%'),
      tile('m-cached', 'cached tokens', String(get(s, 'promptcache_cached_tokens_total'))),
      tile('m-computed', 'computed tokens', String(get(s, 'promptcache_computed_tokens_total'))),
      tile('m-ram', 'cache in RAM', fmtBytes(get(s, 'promptcache_cache_bytes{tier="ram"}'))),
      tile('m-disk', 'cache on disk', fmtBytes(get(s, 'promptcache_cache_bytes{tier="disk"}'))),
      tile('m-active', 'active / queued',
           `${get(s, 'promptcache_requests_active')} / ${get(s, 'promptcache_requests_queued')}`));
  document.getElementById('m-requests').dataset.value = requests;
  const fidelity = document.getElementById('metric-fidelity');
  fidelity.textContent = fidelityLine(s);
  fidelity.dataset.samples = get(s, 'promptcache_fidelity_samples_total');
  const series = (key) => samples.map((x) => get(x, key));
  const x = `last ${Math.round((samples.length * POLL_MS) / 1000)} s`;
  document.getElementById('metric-charts').replaceChildren(
      chart('Prefix hit ratio', lineChart([{ name: 'hits / lookups', color: color('--ram'),
          values: series('promptcache_cache_hit_ratio') }], { max: 1, xLabel: x,
          format: (v) => (100 * v).toFixed(0) + '%' })),
      chart('Prompt tokens per second', lineChart([
          { name: 'cached', color: color('--ram'), values: rates('promptcache_cached_tokens_total') },
          { name: 'computed', color: color('--computed'), values: rates('promptcache_computed_tokens_total') },
          { name: 'generated', color: color('--generated'), values: rates('promptcache_generated_tokens_total') },
      ], { xLabel: x })),
      chart('Time to first token (all requests)', barChart(ttftBuckets(s), { color: color('--accent'),
          label: 'requests per time-to-first-token bucket' })),
      chart('Cache bytes', lineChart([
          { name: 'RAM', color: color('--ram'), values: series('promptcache_cache_bytes{tier="ram"}') },
          { name: 'disk', color: color('--disk'), values: series('promptcache_cache_bytes{tier="disk"}') },
          { name: 'all K/V in use', color: color('--generated'), values: series('promptcache_kv_bytes_in_use') },
      ], { xLabel: x, format: fmtBytes })),
      chart('Requests', lineChart([
          { name: 'active', color: color('--accent'), values: series('promptcache_requests_active') },
          { name: 'queued', color: color('--computed'), values: series('promptcache_requests_queued') },
      ], { xLabel: x })));
}

async function poll() {
  try {
    const r = await api('/metrics');
    if (r.ok) {
      samples.push({ t: Date.now(), m: parsePrometheus(await r.text()) });
      if (samples.length > KEEP) samples.shift();
      render();
    }
  } catch {
    // The server went away for a moment: the next poll tries again.
  }
  setTimeout(poll, POLL_MS);
}

export function initMetrics() {
  poll();
}
