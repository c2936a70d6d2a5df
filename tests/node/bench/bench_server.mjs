// Client side of scripts/bench_server.sh: runs one benchmark scenario against a running
// `promptcache serve` and prints its measurements as one JSON line; `report` turns the lines
// into a Markdown table. Not a test (node --test does not pick it up: no .test.mjs suffix).
//
//   node bench_server.mjs prefix URL [--repeat N]      cold, then warm (same prefix, new ending)
//   node bench_server.mjs fill URL [--repeat N]        cold requests only (before a restart)
//   node bench_server.mjs hit URL [--repeat N]         the filled prefixes, new endings
//   node bench_server.mjs concurrent URL [--repeat N]  8 clients with a shared system prompt
//   node bench_server.mjs sweep URL [--repeat N]       warm TTFT by number of new tokens
//   node bench_server.mjs report FILE.jsonl
//
// Prompts are token ids (exact lengths): a prefix of --prefix tokens (3,290) plus an ending of
// --ending tokens (10), so 3,300 in all; repetition r uses a prefix of its own (seeded words), so
// every "cold" request really misses the cache. Time to first token is measured on the client as
// the time from sending a streamed request to its first chunk with text, next to the server's
// own timings.ttft_ms (from submission to the first token).
import OpenAI from 'openai';
import fs from 'node:fs';
import { args } from './args.mjs';

const WORDS = ('the a of to and in is was for on with as by at from that this it be are were ' +
  'time day night city river mountain garden house road market school letter story song ' +
  'small large old new quiet bright early late green blue golden silver careful sudden ' +
  'walked opened carried found remembered watched wrote built answered followed painted ' +
  'because although while until before after when where however therefore meanwhile ' +
  'teacher farmer doctor sailor painter baker child friend neighbor stranger traveler ' +
  'window bridge lantern harbor forest valley island station library kitchen orchard').split(' ');

// A deterministic pseudo-random word sequence (mulberry32).
function words(seed, n) {
  let s = seed >>> 0;
  const rnd = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const out = [];
  for (let i = 0; i < n; i++) out.push(WORDS[Math.floor(rnd() * WORDS.length)]);
  return out.join(' ');
}

async function tokenize(url, text) {
  const res = await fetch(`${url}/tokenize`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: text }),
  });
  if (!res.ok) throw new Error(`/tokenize: ${res.status} ${await res.text()}`);
  return (await res.json()).tokens;
}

// Exactly n token ids of seeded text (the text is long enough to cut from).
async function tokens(url, seed, n) {
  for (let words_n = Math.ceil(n * 1.2); ; words_n *= 2) {
    const ids = await tokenize(url, words(seed, words_n));
    if (ids.length >= n) return ids.slice(0, n);
  }
}

// n token ids without the BOS a tokenizer may add: cut from the end.
async function ending(url, seed, n) {
  const ids = await tokenize(url, ' ' + words(seed, n * 2));
  return ids.slice(-n);
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// A streamed completion: client-side time to the first text chunk, and the server's timings.
async function streamed(client, model, prompt, maxTokens) {
  const t0 = performance.now();
  const stream = await client.completions.create({
    model, prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  let first = null, timings = null, usage = null;
  for await (const chunk of stream) {
    if (first === null && chunk.choices?.some((c) => c.text)) first = performance.now();
    if (chunk.timings) timings = chunk.timings;
    if (chunk.usage) usage = chunk.usage;
  }
  const end = performance.now();
  return {
    client_ttft_ms: first === null ? null : first - t0,
    server_ttft_ms: timings.ttft_ms,
    prompt_ms: timings.prompt_ms,
    prompt_tokens: usage.prompt_tokens,
    cached_tokens: usage.prompt_tokens_details.cached_tokens,
    computed_tokens: timings.computed_tokens,
    total_ms: end - t0,
  };
}

async function modelId(url) {
  const res = await fetch(`${url}/v1/models`);
  return (await res.json()).data[0].id;
}

// Seeds: prefixes differ per repetition and per script run (--seed), endings per request kind.
const prefixSeed = (base, r) => base * 1000 + r;

async function prefixScenario(url, o, kinds) {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600000 });
  const model = await modelId(url);
  const out = {};
  for (let r = 0; r < o.repeat; r++) {
    const prefix = await tokens(url, prefixSeed(o.seed, r), o.prefix);
    for (const kind of kinds) {
      const end = await ending(url, kind === 'cold' ? 11 : kind === 'warm' ? 22 : 33, o.ending);
      const m = await streamed(client, model, [...prefix, ...end], o.gen);
      (out[kind] ??= []).push(m);
      process.stderr.write(`${kind} #${r}: client ttft ${m.client_ttft_ms.toFixed(1)} ms, server ttft ` +
        `${m.server_ttft_ms.toFixed(1)} ms, cached ${m.cached_tokens}/${m.prompt_tokens}\n`);
    }
  }
  return out;
}

// Warm time to first token against the number of tokens computed: one cached prefix of
// --prefix tokens rounded down to whole blocks (so nothing of it is recomputed), then endings of
// 1..32 tokens.
async function sweepScenario(url, o) {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600000 });
  const model = await modelId(url);
  const prefix = await tokens(url, o.seed * 1000 + 900, Math.floor(o.prefix / 16) * 16);
  await streamed(client, model, [...prefix, ...(await ending(url, 1, 1))], 1);
  const out = { cached_prefix: prefix.length, sweep: [] };
  for (const k of [1, 2, 4, 8, 16, 32]) {
    const runs = [];
    for (let r = 0; r < o.repeat; r++) {
      runs.push(await streamed(client, model, [...prefix, ...(await ending(url, 200 + 10 * k + r, k))], 1));
    }
    out.sweep.push({ new_tokens: k, runs });
    process.stderr.write(`sweep ${k} new tokens: server ttft ${runs.map((m) => m.server_ttft_ms.toFixed(1)).join(', ')} ms\n`);
  }
  return out;
}

async function concurrentScenario(url, o) {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600000 });
  const model = await modelId(url);
  const system = await tokens(url, o.seed * 1000 + 500, o.system);
  const questions = [];
  for (let i = 0; i < o.clients; i++) questions.push(await ending(url, 100 + i, o.question));
  const request = (q) => client.completions.create({
    model, prompt: [...system, ...q], max_tokens: o.gen, temperature: 0, ignore_eos: true,
  });
  // Both ways start from the same state: only the shared system prompt cached.
  const reset = async () => {
    await fetch(`${url}/v1/cache`, { method: 'DELETE' });
    const res = await fetch(`${url}/v1/cache/load`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: system }),
    });
    if (!res.ok) throw new Error(`/v1/cache/load: ${res.status} ${await res.text()}`);
  };
  const summarize = (results, ms) => {
    const generated = results.reduce((s, r) => s + r.usage.completion_tokens, 0);
    return {
      wall_ms: ms, generated_tokens: generated, aggregate_tps: generated * 1000 / ms,
      cached_tokens: results.map((r) => r.usage.prompt_tokens_details.cached_tokens),
      per_request_tps: results.map((r) => r.timings.generation_tokens_per_second),
    };
  };
  const out = { sequential: [], concurrent: [] };
  for (let r = 0; r < o.repeat; r++) {
    await reset();
    let t0 = performance.now();
    const seq = [];
    for (const q of questions) seq.push(await request(q));
    out.sequential.push(summarize(seq, performance.now() - t0));
    await reset();
    t0 = performance.now();
    const conc = await Promise.all(questions.map(request));
    out.concurrent.push(summarize(conc, performance.now() - t0));
    process.stderr.write(`concurrent #${r}: sequential ${out.sequential.at(-1).aggregate_tps.toFixed(1)} tok/s, ` +
      `${o.clients} at once ${out.concurrent.at(-1).aggregate_tps.toFixed(1)} tok/s\n`);
  }
  return out;
}

function report(file) {
  const rows = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const get = (name) => rows.find((r) => r.scenario === name);
  const lines = ['| Scenario | Measure | Median | Runs | Target |', '|---|---|---|---|---|'];
  const fmt = (x, d = 0) => (x === null || x === undefined ? 'n/a' : x.toFixed(d));
  const all = (xs, d = 0) => xs.map((x) => fmt(x, d)).join(', ');
  const bench = get('bench');
  let predicted = null;
  if (bench) {
    predicted = (bench.prefix + bench.ending) / bench.prompt_tps * 1000;
    lines.push(`| bench -p ${bench.prefix + bench.ending} | prefill rate (tokens/s) | ${fmt(bench.prompt_tps, 1)} | median of ${bench.repetitions} | |`);
    lines.push(`| | predicted cold prefill (ms) | ${fmt(predicted)} | | |`);
  }
  const ttftRows = (label, ms, target) => {
    for (const key of ['client_ttft_ms', 'server_ttft_ms']) {
      const xs = ms.map((m) => m[key]);
      lines.push(`| ${key === 'client_ttft_ms' ? label : ''} | TTFT ${key === 'client_ttft_ms' ? 'client' : 'server'} (ms) | ` +
        `${fmt(median(xs))} | ${all(xs)} | ${key === 'client_ttft_ms' ? target : ''} |`);
    }
    const c = ms[0];
    lines.push(`| | cached / computed tokens | ${c.cached_tokens} / ${c.computed_tokens} | | |`);
  };
  const a = get('prefix');
  if (a) {
    const limit = predicted ? `<= ${fmt(predicted * 1.25)} (bench + 25%)` : '';
    ttftRows(`(a) ${a.prompt_tokens}-token prompt, cold`, a.cold, limit);
    ttftRows('(a) same prefix, new ending (warm)', a.warm, '<= 100');
  }
  const c = get('fill');
  const h = get('hit');
  if (c) ttftRows('(c) cold before the restart (recompute)', c.cold, '');
  if (h) ttftRows('(c) after a restart, prefix from the disk tier', h.disk, '<= 300');
  const w = get('sweep');
  if (w) {
    for (const { new_tokens: k, runs } of w.sweep) {
      const c = median(runs.map((m) => m.client_ttft_ms));
      const sv = median(runs.map((m) => m.server_ttft_ms));
      lines.push(`| ${k === 1 ? `(w) ${w.cached_prefix} cached tokens, then N new` : ''} | TTFT client / server (ms), N = ${k} | ` +
        `${fmt(c, 1)} / ${fmt(sv, 1)} | ${all(runs.map((m) => m.server_ttft_ms), 1)} | |`);
    }
  }
  const b = get('concurrent');
  if (b) {
    const seq = b.sequential.map((x) => x.aggregate_tps);
    const conc = b.concurrent.map((x) => x.aggregate_tps);
    lines.push(`| (b) ${b.clients} requests one at a time, ${b.gen} tokens each | generation tokens/s | ${fmt(median(seq), 1)} | ${all(seq, 1)} | |`);
    lines.push(`| (b) ${b.clients} concurrent clients | aggregate generation tokens/s | ${fmt(median(conc), 1)} | ${all(conc, 1)} | |`);
    const ratios = conc.map((x, i) => x / seq[i]);  // each repetition's pair, run back to back
    lines.push(`| | speedup | ${fmt(median(ratios), 2)}x | ${all(ratios, 2)} | >= 2x |`);
  }
  console.log(lines.join('\n'));
}

async function main() {
  const a = args(process.argv.slice(2));
  const [scenario, url] = a._;
  const o = {
    repeat: Number(a.repeat ?? 3), prefix: Number(a.prefix ?? 3290), ending: Number(a.ending ?? 10),
    gen: Number(a.gen ?? 8), seed: Number(a.seed ?? 1), clients: Number(a.clients ?? 8),
    system: Number(a.system ?? 1000), question: Number(a.question ?? 16),
  };
  let result;
  if (scenario === 'report') return report(url);
  if (scenario === 'prefix') result = await prefixScenario(url, o, ['cold', 'warm']);
  else if (scenario === 'fill') result = await prefixScenario(url, o, ['cold']);
  else if (scenario === 'hit') result = await prefixScenario(url, o, ['disk']);
  else if (scenario === 'sweep') result = await sweepScenario(url, o);
  else if (scenario === 'concurrent') result = { ...(await concurrentScenario(url, o)), clients: o.clients, gen: o.gen, system: o.system };
  else throw new Error(`unknown scenario '${scenario}'`);
  console.log(JSON.stringify({ scenario, prompt_tokens: o.prefix + o.ending, ...o, ...result }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
