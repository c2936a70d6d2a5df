// The cache map of one response (the API's "cache_map": docs/server.md): the prompt's tokens as
// a strip of cells coloured by where their K/V came from, then the generated tokens, with a
// wider gap at each cache block boundary. Hovering a cell, or moving through the strip with
// the arrow keys, shows the token's position and text.
import { el, fmtMs } from './util.js';

export const SOURCES = [
  ['ram', 'prefix hit (RAM)'],
  ['disk', 'prefix hit (disk tier)'],
  ['remote', 'remote tier'],
  ['module', 'schema module'],
  ['segment', 'cached segment (reused after other text)'],
  ['computed', 'computed'],
  ['generated', 'generated'],
];

export function legend() {
  return SOURCES.map(([k, label]) => el('span', {}, el('i', { class: 'sw ' + k }), label));
}

// Visible text for a token: whitespace and control characters spelled out.
function showPiece(p) {
  return JSON.stringify(p ?? '').slice(1, -1);
}

export function renderCacheMap(map, timings) {
  const n = map.runs.reduce((a, r) => a + r.length, 0);
  const src = new Array(n);
  for (const r of map.runs) src.fill(r.source, r.start, r.start + r.length);
  const pos = (i) => (i < map.prompt_tokens ? (map.positions ? map.positions[i] : i)
                                            : (map.positions ? null : i));
  const hover = el('div', { class: 'cm-hover', 'aria-live': 'polite' }, ' ');
  const describe = (i) => {
    const p = pos(i);
    const where = i < map.prompt_tokens ? `prompt token ${i}` : `generated token ${i - map.prompt_tokens}`;
    return `${where}${p !== null && p !== i ? ` at position ${p}` : ''}` +
           ` · ${src[i]} · block ${Math.floor((p ?? i) / map.block_size)} · "${showPiece(map.pieces[i])}"`;
  };
  const strip = el('div', {
    class: 'strip', tabindex: 0, role: 'group',
    'aria-label': `cache map of ${n} tokens; arrow keys move through them`,
  });
  const cells = [];
  for (let i = 0; i < n; ++i) {
    const p = pos(i) ?? i;
    const boundary = i > 0 && i < map.prompt_tokens && p % map.block_size === 0;
    const c = el('span', { class: `t ${src[i]}${boundary ? ' b' : ''}`, 'data-i': i });
    cells.push(c);
  }
  strip.append(...cells);
  let sel = -1;
  const select = (i) => {
    if (sel >= 0) cells[sel].classList.remove('sel');
    sel = Math.max(0, Math.min(n - 1, i));
    cells[sel].classList.add('sel');
    hover.textContent = describe(sel);
  };
  strip.addEventListener('mouseover', (e) => {
    const i = e.target.dataset?.i;
    if (i !== undefined) hover.textContent = describe(Number(i));
  });
  strip.addEventListener('keydown', (e) => {
    const step = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: map.block_size, ArrowUp: -map.block_size,
                   Home: -n, End: n }[e.key];
    if (step === undefined) return;
    e.preventDefault();
    select(sel < 0 ? 0 : sel + step);
  });
  const t = timings || {};
  const stat = (k, v) => el('span', {}, k + ' ', el('b', { text: String(v) }));
  const saved = map.recompute_estimate_ms - map.ttft_ms;
  const stats = el('div', { class: 'cm-stats' },
      stat('prompt', map.prompt_tokens),
      stat('cached_tokens', map.cached_tokens),
      stat('computed', map.computed_tokens),
      stat('generated', map.generated_tokens),
      stat('TTFT', fmtMs(map.ttft_ms)),
      stat('full recompute ≈', fmtMs(map.recompute_estimate_ms)),
      saved > 0 ? stat('saved ≈', fmtMs(saved)) : null,
      t.generation_tokens_per_second ? stat('generation', t.generation_tokens_per_second.toFixed(0) + ' tok/s') : null);
  const box = el('div', { class: 'cachemap', 'data-cached': map.cached_tokens,
                          'data-prompt': map.prompt_tokens }, stats, strip, hover);
  return box;
}
