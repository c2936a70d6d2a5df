// The prefix tree panel: every cached block (GET /v1/cache/tree) as an icicle chart. A block is
// a rectangle from its first token to its last along x; blocks that continue it sit to its right
// and share its height, split between them by how many chains (leaves) each leads to. Colour
// says RAM only, also on disk, a schema module's block, or a segment's (CompletionRequest's
// segments: a chain of its own, found by its tokens wherever it comes again, labelled
// "segment"); a dark border marks pinned blocks.
// Selecting one shows its text and lets the user pin, unpin or evict it.
import { api, apiJson, el, fmtBytes } from './util.js';
import { svg } from './svg.js';

let selected = null;  // key
let nodes = new Map();

function buildTree(blocks) {
  nodes = new Map(blocks.map((b) => [b.key, { ...b, children: [] }]));
  const roots = [];
  for (const n of nodes.values()) {
    const p = n.parent && nodes.get(n.parent);
    (p ? p.children : roots).push(n);
  }
  const leaves = (n) => (n.leaves = n.children.length ? n.children.reduce((a, c) => a + leaves(c), 0) : 1);
  roots.forEach(leaves);
  return roots;
}

// The chain's tokens up to and including this block (what /v1/cache/pin takes).
function chainTokens(n) {
  const parts = [];
  for (let x = n; x; x = x.parent && nodes.get(x.parent)) parts.unshift(x.tokens);
  return parts.flat();
}

function chainText(n) {
  const parts = [];
  for (let x = n; x; x = x.parent && nodes.get(x.parent)) parts.unshift(x.text);
  return parts;
}

function showDetail(n) {
  const box = document.getElementById('tree-detail');
  if (!n) {
    box.replaceChildren(el('p', { class: 'muted', text: 'Select a block to see it here.' }));
    return;
  }
  const parts = chainText(n);
  const status = el('span', { class: 'muted', role: 'status' });
  const act = async (what) => {
    status.textContent = '...';
    try {
      if (what === 'evict') {
        await apiJson('/v1/cache/' + n.key, { method: 'DELETE' });
      } else {
        await apiJson('/v1/cache/' + what, { method: 'POST', json: { prompt: chainTokens(n) } });
      }
      status.textContent = what === 'evict' ? 'evicted' : what + 'ned';
      await refreshTree();
    } catch (e) {
      status.textContent = e.message;
    }
  };
  box.replaceChildren(
      el('h3', { text: `${n.kind} block at tokens ${n.depth}-${n.depth + n.tokens.length - 1}` }),
      el('p', {}, `key ${n.key} · ${n.hits} hits · idle ${n.idle_seconds.toFixed(1)} s · ` +
                  `${!n.in_ram ? 'disk only' : n.on_disk ? 'RAM and disk' : 'RAM only'}${n.pinned ? ' · pinned' : ''} · ` +
                  `${n.leaves} chain${n.leaves === 1 ? '' : 's'} continue through it`),
      el('pre', {}, el('span', { class: 'muted', text: parts.slice(0, -1).join('') }),
         el('b', { text: parts[parts.length - 1] })),
      el('div', { class: 'row' },
         n.kind === 'prefix' ? el('button', { type: 'button', id: 'tree-pin', onclick: () => act('pin') }, 'Pin') : null,
         n.kind === 'prefix' ? el('button', { type: 'button', id: 'tree-unpin', onclick: () => act('unpin') }, 'Unpin') : null,
         el('button', { type: 'button', id: 'tree-evict', onclick: () => act('evict') }, 'Evict (with what follows)'),
         status));
}

function draw(roots, blockSize) {
  const box = document.getElementById('tree-chart');
  if (!roots.length) {
    box.replaceChildren(el('p', { class: 'muted', text: 'The cache is empty: send a prompt first.' }));
    showDetail(null);
    return;
  }
  let maxEnd = 0;
  for (const n of nodes.values()) maxEnd = Math.max(maxEnd, n.depth + n.tokens.length);
  const total = roots.reduce((a, r) => a + r.leaves, 0);
  const rowH = 22, W = Math.max(box.clientWidth - 2, 320), L = 4, T = 18;
  const H = T + total * rowH + 4;
  const scale = (W - L - 4) / maxEnd;
  const g = svg('svg', { width: W, height: H, role: 'tree', 'aria-label': 'cached prefixes' });
  const css = getComputedStyle(document.documentElement);
  // Blocks on disk only: the disk colour, hatched.
  const pattern = svg('pattern', { id: 'disk-only', width: 6, height: 6, patternUnits: 'userSpaceOnUse',
                                   patternTransform: 'rotate(45)' });
  pattern.append(svg('rect', { width: 6, height: 6, fill: css.getPropertyValue('--disk'), 'fill-opacity': 0.35 }),
                 svg('line', { x1: 0, y1: 0, x2: 0, y2: 6, stroke: css.getPropertyValue('--disk'), 'stroke-width': 3 }));
  g.append(svg('defs'));
  g.firstChild.append(pattern);
  for (let t = 0; t <= maxEnd; t += blockSize * Math.ceil(maxEnd / blockSize / 10)) {
    const x = L + t * scale;
    g.append(svg('line', { class: 'grid', x1: x, x2: x, y1: T - 4, y2: H }));
    g.append(svg('text', { x: x + 2, y: 12 }, String(t)));
  }
  const fill = (n) => !n.in_ram ? 'url(#disk-only)'
      : css.getPropertyValue(n.kind === 'module' ? '--module' : n.kind === 'segment' ? '--segment'
                             : n.on_disk ? '--disk' : '--ram');
  const place = (n, row) => {
    const x = L + n.depth * scale, w = Math.max(2, n.tokens.length * scale - 1);
    const r = svg('rect', { x, y: T + row * rowH, width: w, height: n.leaves * rowH - 2,
                            fill: fill(n), tabindex: 0, role: 'treeitem', 'data-key': n.key,
                            class: `node ${n.kind}${n.pinned ? ' pinned' : ''}${n.in_ram ? '' : ' disk-only'}${n.key === selected ? ' sel' : ''}`,
                            'aria-label': `${n.kind} block, tokens ${n.depth} to ${n.depth + n.tokens.length - 1}, ${n.hits} hits${n.pinned ? ', pinned' : ''}` });
    r.append(svg('title', {}, `${n.text}\n${n.hits} hits, idle ${n.idle_seconds.toFixed(0)} s`));
    const pick = () => {
      selected = n.key;
      g.querySelectorAll('.node.sel').forEach((e) => e.classList.remove('sel'));
      r.classList.add('sel');
      showDetail(n);
    };
    r.addEventListener('click', pick);
    r.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ') {
        e.preventDefault();
        pick();
      }
    });
    g.append(r);
    const fit = Math.floor((w - 6) / 6);  // characters of the block's text that fit
    if (fit >= 3) {
      // A segment's first block says so: its chain is a segment, not a prefix from token 0.
      const t = (n.kind === 'segment' && !n.parent ? 'segment: ' : '') + n.text.replace(/\s+/g, ' ');
      g.append(svg('text', { class: 'label', x: x + 3, y: T + row * rowH + 14 },
                   t.length > fit ? t.slice(0, fit - 1) + '…' : t));
    }
    let sub = row;
    for (const c of n.children) {
      place(c, sub);
      sub += c.leaves;
    }
  };
  let row = 0;
  for (const r of roots) {
    place(r, row);
    row += r.leaves;
  }
  box.replaceChildren(g);
  showDetail(selected ? nodes.get(selected) : null);
}

export async function refreshTree() {
  const summary = document.getElementById('tree-summary');
  try {
    const [tree, list] = await Promise.all([apiJson('/v1/cache/tree'), apiJson('/v1/cache')]);
    const roots = buildTree(tree.data);
    const ram = tree.data.filter((b) => b.in_ram);
    const diskOnly = tree.data.length - ram.length;
    const bytes = (await api('/v1/models').then((r) => r.json())).data[0].meta.kv_bytes_per_token;
    const tokens = ram.reduce((a, b) => a + b.tokens.length, 0);
    const segments = ram.filter((b) => b.kind === 'segment').length;
    summary.textContent = `${ram.length} blocks in RAM (${tokens} tokens, ${fmtBytes(tokens * bytes)})` +
        `, ${list.data.filter((e) => e.in_ram).length} chains` +
        (segments ? `, ${segments} segment blocks` : '') +
        (diskOnly ? `, ${diskOnly} blocks on disk only (hatched)` : '');
    draw(roots, tree.block_size);
  } catch (e) {
    summary.textContent = e.message;
  }
}

export function initTree() {
  document.getElementById('tree-refresh').addEventListener('click', refreshTree);
  document.getElementById('tree-clear').addEventListener('click', async () => {
    await apiJson('/v1/cache', { method: 'DELETE' }).catch((e) => {
      document.getElementById('tree-summary').textContent = e.message;
    });
    refreshTree();
  });
}
