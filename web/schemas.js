// The schemas panel: each loaded PML schema's module ruler (the position ranges it reserves,
// union members stacked on the same range, parameters marked inside their module, cached or
// computed-per-request modules told apart, scaffolds bracketed under the modules they encode
// together) and a composer that builds a <prompt> by ticking
// modules and filling parameters, then sends it and shows its cache map.
import { state, apiJson, el, fmtMs } from './util.js';
import { svg } from './svg.js';
import { renderCacheMap } from './cachemap.js';
import { streamCompletion, samplingSettings } from './chat.js';

const escAttr = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/"/g, '&quot;');
const cdata = (s) => (s ? `<![CDATA[${s.replace(/]]>/g, ']]]]><![CDATA[>')}]]>` : '');

// Rows for the ruler: each module on the first row where it overlaps nothing (union members,
// which share one range, land side by side on rows of their own).
function packRows(mods) {
  const rows = [];
  for (const m of [...mods].sort((a, b) => a.start - b.start || a.end - b.end)) {
    let r = rows.findIndex((end) => end <= m.start);
    if (r < 0) r = rows.push(0) - 1;
    rows[r] = m.end;
    m.row = r;
  }
  return rows.length;
}

function ruler(layout) {
  const css = getComputedStyle(document.documentElement);
  const color = (v) => css.getPropertyValue(v).trim();
  const mods = layout.modules.map((m) => ({ ...m }));
  const nrows = packRows(mods);
  const byName = new Map(mods.map((m) => [m.name, m]));
  const scaffolds = layout.scaffolds.map((sc) => {
    const ms = sc.members.map((n) => byName.get(n)).filter(Boolean);
    return { ...sc, start: Math.min(...ms.map((m) => m.start)), end: Math.max(...ms.map((m) => m.end)) };
  }).filter((sc) => Number.isFinite(sc.start));
  const W = 900, L = 4, T = 16, rowH = 26, H = T + (nrows + 1 + scaffolds.length) * rowH + 6;
  const scale = (W - L - 4) / Math.max(1, layout.total_length);
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', width: '100%',
                         'aria-label': `positions 0 to ${layout.total_length} reserved by schema ${layout.name}` });
  const step = Math.max(10, 10 ** Math.floor(Math.log10(layout.total_length / 4)));
  for (let t = 0; t <= layout.total_length; t += step) {
    g.append(svg('line', { class: 'grid', x1: L + t * scale, x2: L + t * scale, y1: T - 4, y2: H }));
    g.append(svg('text', { x: L + t * scale + 2, y: 11 }, String(t)));
  }
  for (const r of layout.always.ranges) {
    const rect = svg('rect', { x: L + r.start * scale, y: T, width: Math.max(1, (r.end - r.start) * scale),
                               height: rowH - 4, fill: color('--generated') });
    rect.append(svg('title', {}, `always included: ${r.start}-${r.end}`));
    g.append(rect);
  }
  g.append(svg('text', { x: L + 2, y: T + 14 }, 'always'));
  for (const m of mods) {
    const y = T + (m.row + 1) * rowH;
    const x = L + m.start * scale, w = Math.max(2, (m.end - m.start) * scale);
    const rect = svg('rect', { x, y, width: w, height: rowH - 4, rx: 3,
                               fill: m.cached ? color('--module') : 'none',
                               stroke: m.cached ? 'none' : color('--computed'), 'stroke-dasharray': '4 2' });
    rect.append(svg('title', {}, `${m.name}: positions ${m.start}-${m.end} (${m.tokens} tokens` +
                    `${m.union !== null && m.union !== undefined ? `, union ${m.union}` : ''}` +
                    `${m.cached ? ', cached' : ', computed per request'})`));
    g.append(rect);
    for (const p of m.parameters) {
      const pr = svg('rect', { x: L + p.start * scale, y: y + 3, width: Math.max(2, p.length * scale),
                               height: rowH - 10, fill: color('--computed') });
      pr.append(svg('title', {}, `parameter ${p.name}: ${p.length} tokens at ${p.start}`));
      g.append(pr);
    }
    g.append(svg('text', { x: x + 3, y: y + 15 }, m.name.length * 6 < w ? m.name : ''));
  }
  // A scaffold: a bracket under the range its members span (they share one attention span).
  scaffolds.forEach((sc, i) => {
    const y = T + (nrows + 1 + i) * rowH + 4;
    const x1 = L + sc.start * scale, x2 = L + sc.end * scale;
    const b = svg('path', { class: 'scaffold', d: `M${x1},${y} v6 H${x2} v-6`, fill: 'none',
                            stroke: color('--module'), 'stroke-width': 2 });
    b.append(svg('title', {}, `scaffold ${sc.members.join(' + ')}: encoded together, positions ${sc.start}-${sc.end}`));
    g.append(b);
    g.append(svg('text', { x: x1 + 3, y: y + 18 }, `scaffold ${sc.members.join(' + ')}`));
  });
  return g;
}

// The PML prompt for the ticked modules: children nested in their parent's element.
function buildPml(layout, picks, args, text) {
  const byParent = new Map();
  for (const m of layout.modules) {
    if (!picks.has(m.name)) continue;
    const k = m.parent ?? '';
    if (!byParent.has(k)) byParent.set(k, []);
    byParent.get(k).push(m);
  }
  const emit = (parent) => (byParent.get(parent) || []).map((m) => {
    const attrs = m.parameters.map((p) => args.get(`${m.name}/${p.name}`))
        .map((v, i) => (v ? ` ${m.parameters[i].name}="${escAttr(v)}"` : '')).join('');
    const inner = emit(m.name);
    return inner ? `<${m.name}${attrs}>${inner}</${m.name}>` : `<${m.name}${attrs}/>`;
  }).join('');
  return `<prompt schema="${escAttr(layout.name)}">${emit('')}${cdata(text)}</prompt>`;
}

function composer(layout) {
  const picks = new Set(), args = new Map();
  const preview = el('pre', { class: 'pml-preview' });
  const text = el('textarea', { rows: 2, class: 'new-text', 'aria-label': 'new text after the modules' });
  text.value = '\nOne day,';
  const update = () => { preview.textContent = buildPml(layout, picks, args, text.value); };
  text.addEventListener('input', update);
  const boxes = new Map();
  const mods = layout.modules.map((m) => {
    const box = el('input', { type: 'checkbox', 'data-module': m.name });
    boxes.set(m.name, box);
    box.addEventListener('change', () => {
      if (box.checked) {
        picks.add(m.name);
        // One member of a union at a time; a child needs its parent.
        for (const o of layout.modules) {
          if (o !== m && o.union !== null && o.union === m.union && o.parent === m.parent && boxes.get(o.name).checked) {
            boxes.get(o.name).checked = false;
            picks.delete(o.name);
          }
        }
        if (m.parent && !picks.has(m.parent)) {
          boxes.get(m.parent).checked = true;
          picks.add(m.parent);
        }
      } else {
        picks.delete(m.name);
      }
      update();
    });
    const params = m.parameters.map((p) => {
      const input = el('input', { type: 'text', placeholder: p.default ?? '', 'data-param': p.name,
                                  'aria-label': `${m.name} parameter ${p.name}` });
      input.addEventListener('input', () => {
        args.set(`${m.name}/${p.name}`, input.value);
        if (input.value && !box.checked) box.click();
        update();
      });
      return el('label', {}, `${p.name} (${p.length} tokens)`, input);
    });
    return el('div', { class: 'mod' },
        el('label', {}, box, el('b', { text: m.name }),
           el('span', { class: 'muted', text: `${m.start}-${m.end}` +
               `${m.union !== null && m.union !== undefined ? ` · union ${m.union}` : ''}` +
               `${m.parent ? ` · in ${m.parent}` : ''}${m.cached ? '' : ' · not cached'}` })),
        ...params);
  });
  const out = el('div', { class: 'compose-out', 'aria-live': 'polite' });
  const send = el('button', { type: 'button', class: 'primary compose-send' }, 'Send prompt');
  send.addEventListener('click', async () => {
    send.disabled = true;
    const textEl = el('div', { class: 'msg' }, el('div', { class: 'text' }));
    out.replaceChildren(textEl);
    try {
      const r = await streamCompletion('/v1/completions',
          { model: state.model, prompt: preview.textContent, ...samplingSettings() },
          { onText: (_, all) => { textEl.firstChild.textContent = all; } });
      if (r.cache_map) textEl.append(renderCacheMap(r.cache_map, r.timings));
      if (r.timings) {
        textEl.append(el('p', { class: 'muted', text:
            `reused ${r.timings.reused_tokens} tokens from modules, encoded ${r.timings.encoded_tokens}; ` +
            `gather ${fmtMs(r.timings.gather_ms)}, prefill ${fmtMs(r.timings.prefill_ms)}` }));
      }
      textEl.dataset.done = '1';
    } catch (e) {
      textEl.append(el('p', { class: 'error', text: e.message }));
      textEl.dataset.done = 'error';
    } finally {
      send.disabled = false;
    }
  });
  update();
  return el('div', { class: 'composer' }, el('h3', { text: 'Compose a prompt' }),
            el('div', { class: 'mods' }, ...mods), el('label', {}, 'New text', text),
            preview, el('div', { class: 'row' }, send), out);
}

async function schemaCard(name) {
  const layout = await apiJson('/v1/schemas/' + encodeURIComponent(name));
  const drop = el('button', { type: 'button' }, 'Unload');
  drop.addEventListener('click', async () => {
    await apiJson('/v1/schemas/' + encodeURIComponent(name), { method: 'DELETE' }).catch(() => {});
    refreshSchemas();
  });
  return el('article', { class: 'schema', 'data-schema': name },
      el('div', { class: 'row' }, el('h2', { text: `Schema ${layout.name}` }), drop),
      el('p', { class: 'muted', text: `${layout.total_length} positions · ${layout.module_count} modules ` +
          `(${layout.cached_modules} cached, ${layout.cached_tokens} tokens) · ${layout.unions.length} unions` +
          `${layout.persisted ? ' · persisted' : ''}` }),
      el('div', { class: 'chart-box' }, ruler(layout)),
      el('p', { class: 'muted', text: [
        ...layout.unions.map((u) => `union ${u.members.join(' | ')} (default ${u.default ?? 'none'})`),
      ].join(' · ') }),
      composer(layout));
}

export async function refreshSchemas() {
  const list = document.getElementById('schema-list');
  try {
    const j = await apiJson('/v1/schemas');
    if (!j.data.length) {
      list.replaceChildren(el('p', { class: 'muted', text: 'No schema is loaded: load one above.' }));
      document.getElementById('schema-load').open = true;
      return;
    }
    list.replaceChildren(...(await Promise.all(j.data.map((s) => schemaCard(s.name)))));
  } catch (e) {
    list.replaceChildren(el('p', { class: 'error', text: e.message }));
  }
}

export function initSchemas() {
  document.getElementById('schema-send').addEventListener('click', async () => {
    const status = document.getElementById('schema-load-status');
    status.textContent = 'loading...';
    try {
      const j = await apiJson('/v1/schemas', { method: 'POST', headers: { 'Content-Type': 'application/xml' },
                                               body: document.getElementById('schema-xml').value });
      status.textContent = `loaded ${j.name}: encoded ${j.load.encoded_tokens} tokens in ${fmtMs(j.load.encode_ms)}`;
      await refreshSchemas();
    } catch (e) {
      status.textContent = e.message;
    }
  });
}
