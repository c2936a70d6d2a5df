// Small SVG charts drawn by hand (no charting library): lines over time and bars.
const NS = 'http://www.w3.org/2000/svg';

export function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// series: [{name, color (CSS), values: [number]}], all of one length (oldest first).
// opts: {width, height, format(v), max}.
export function lineChart(series, opts = {}) {
  const W = opts.width || 420, H = opts.height || 150, L = 66, R = 8, T = 14, B = 22;
  const n = Math.max(2, ...series.map((s) => s.values.length));
  const max = opts.max ?? niceMax(Math.max(0, ...series.flatMap((s) => s.values.filter(Number.isFinite))));
  const fmt = opts.format || ((v) => String(+v.toPrecision(3)));
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img',
                         'aria-label': opts.label || series.map((s) => s.name).join(', ') });
  for (let k = 0; k <= 4; ++k) {
    const y = T + (H - T - B) * (1 - k / 4);
    g.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y, y2: y }));
    g.append(svg('text', { x: L - 4, y: y + 4, 'text-anchor': 'end' }, fmt((max * k) / 4)));
  }
  if (opts.xLabel) {
    g.append(svg('text', { x: W - R, y: 10, 'text-anchor': 'end' }, opts.xLabel));
  }
  series.forEach((s, j) => {
    const pts = s.values.map((v, i) => {
      const x = L + ((W - L - R) * (i + n - s.values.length)) / (n - 1);
      const y = T + (H - T - B) * (1 - Math.min(1, (Number.isFinite(v) ? v : 0) / max));
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
    if (pts.length) {
      g.append(svg('polyline', { points: pts.join(' '), fill: 'none', stroke: s.color,
                                 'stroke-width': 2 }));
    }
    g.append(svg('rect', { x: L + 4 + j * 110, y: H - 14, width: 10, height: 10, fill: s.color }));
    g.append(svg('text', { x: L + 18 + j * 110, y: H - 5 }, s.name));
  });
  return g;
}

// bars: [{label, value}]; colour from CSS.
export function barChart(bars, opts = {}) {
  const W = opts.width || 420, H = opts.height || 150, L = 40, R = 8, T = 8, B = 30;
  const max = niceMax(Math.max(0, ...bars.map((b) => b.value)));
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': opts.label || '' });
  for (let k = 0; k <= 4; ++k) {
    const y = T + (H - T - B) * (1 - k / 4);
    g.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: y, y2: y }));
    g.append(svg('text', { x: L - 4, y: y + 4, 'text-anchor': 'end' }, String(+(max * k / 4).toPrecision(3))));
  }
  const bw = (W - L - R) / Math.max(1, bars.length);
  bars.forEach((b, i) => {
    const h = ((H - T - B) * b.value) / max;
    const x = L + i * bw;
    const r = svg('rect', { x: x + 1, y: T + (H - T - B) - h, width: Math.max(1, bw - 2), height: h,
                            fill: opts.color || 'var(--accent)' });
    r.append(svg('title', {}, `${b.label}: ${b.value}`));
    g.append(r);
    if (bars.length <= 8 || i % 2 === 0) {
      g.append(svg('text', { x: x + bw / 2, y: H - B + 12, 'text-anchor': 'middle' }, b.label));
    }
  });
  return g;
}

// series: [{name, color, points: [[x, y]]}] with numeric x (e.g. tokens), drawn as lines with
// dots on a shared linear scale from 0. opts: {width, height, format(v), xLabel, label}.
export function xyChart(series, opts = {}) {
  const W = opts.width || 420, H = opts.height || 170, L = 66, R = 10, T = 18, B = 32;
  const all = series.flatMap((s) => s.points);
  const xMax = niceMax(Math.max(0, ...all.map((p) => p[0])));
  const yMax = niceMax(Math.max(0, ...all.map((p) => p[1]).filter(Number.isFinite)));
  const fmt = opts.format || ((v) => String(+v.toPrecision(3)));
  const X = (x) => L + ((W - L - R) * x) / xMax;
  const Y = (y) => T + (H - T - B) * (1 - Math.min(1, (Number.isFinite(y) ? y : 0) / yMax));
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img',
                         'aria-label': opts.label || series.map((s) => s.name).join(', ') });
  for (let k = 0; k <= 4; ++k) {
    g.append(svg('line', { class: 'grid', x1: L, x2: W - R, y1: Y((yMax * k) / 4), y2: Y((yMax * k) / 4) }));
    g.append(svg('text', { x: L - 4, y: Y((yMax * k) / 4) + 4, 'text-anchor': 'end' }, fmt((yMax * k) / 4)));
    g.append(svg('text', { x: X((xMax * k) / 4), y: H - B + 12, 'text-anchor': 'middle' },
                 String(+((xMax * k) / 4).toPrecision(3))));
  }
  if (opts.xLabel) g.append(svg('text', { x: W - R, y: 10, 'text-anchor': 'end' }, opts.xLabel));
  series.forEach((s, j) => {
    const pts = s.points.map(([x, y]) => `${X(x).toFixed(1)},${Y(y).toFixed(1)}`);
    if (pts.length) {
      g.append(svg('polyline', { points: pts.join(' '), fill: 'none', stroke: s.color, 'stroke-width': 2 }));
    }
    for (const [x, y] of s.points) {
      const dot = svg('circle', { cx: X(x).toFixed(1), cy: Y(y).toFixed(1), r: 2.5, fill: s.color,
                                  class: 'point' });
      dot.append(svg('title', {}, `${s.name}: ${fmt(y)} at ${x}`));
      g.append(dot);
    }
    g.append(svg('rect', { x: 8 + j * 138, y: H - 12, width: 10, height: 10, fill: s.color }));
    g.append(svg('text', { x: 22 + j * 138, y: H - 3 }, s.name));
  });
  return g;
}
