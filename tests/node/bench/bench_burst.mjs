// Client side of scripts/bench_burst.sh: a burst of clients arriving together, each with a shared
// system prefix and its own question (token ids, identical for every server), against a running
// promptcache or llama-server (llama.cpp, ik_llama.cpp). Prints one JSON line per run; `report`
// turns the lines into a Markdown table of medians. Not a test (no .test.mjs suffix).
//
//   node bench_burst.mjs run URL --kind promptcache|llama [--clients 8] [--system 1000]
//        [--question 16] [--gen 32] [--seed 1] [--vocab 40000] [--label NAME] [--rep R]
//   node bench_burst.mjs report FILE.jsonl
//
// One run is the cold burst on a fresh server (nothing cached), then the warm burst: the same
// system prefix with new questions (the prefix cached by the cold burst). For each: wall time
// from the first request sent to the last answer, time to first token per client (streamed: to
// the first chunk with text), and the prompt tokens the server computed, read from its /metrics
// before and after (promptcache_computed_tokens_total; llama-server's llamacpp:prompt_tokens_total,
// which needs --metrics).
import OpenAI from 'openai';
import fs from 'node:fs';
import { args } from './args.mjs';

// Seeded token ids in [lo, hi) (mulberry32): plain text tokens of a GPT-2-sized vocabulary.
function ids(seed, n, lo, hi) {
  let s = seed >>> 0;
  const out = [];
  for (let i = 0; i < n; i++) {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out.push(lo + Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * (hi - lo)));
  }
  return out;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function metric(url, kind) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const name = kind === 'llama' ? 'llamacpp:prompt_tokens_total' : 'promptcache_computed_tokens_total';
  for (const line of text.split('\n')) {
    if (line.startsWith(name + ' ')) return Number(line.slice(name.length + 1));
  }
  throw new Error(`${url}/metrics has no ${name} (llama-server needs --metrics)`);
}

async function sharedInFlight(url, kind) {
  if (kind !== 'promptcache') return null;
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(/^promptcache_prefix_shared_in_flight_tokens_total (\S+)$/m);
  return m ? Number(m[1]) : null;
}

async function burst(client, url, o, system, questions) {
  const before = await metric(url, o.kind);
  const shared0 = await sharedInFlight(url, o.kind);
  const t0 = performance.now();
  const one = async (q) => {
    const stream = await client.completions.create({
      model: o.model, prompt: [...system, ...q], max_tokens: o.gen, temperature: 0, ignore_eos: true,
      stream: true,
    });
    let first = null, text = '';
    for await (const chunk of stream) {
      const piece = chunk.choices?.[0]?.text ?? '';
      if (first === null && piece) first = performance.now() - t0;
      text += piece;
    }
    return { ttft_ms: first, text };
  };
  const results = await Promise.all(questions.map(one));
  const wall = performance.now() - t0;
  // llama-server counts a slot's prompt tokens when the slot finishes: read after all answers.
  const computed = (await metric(url, o.kind)) - before;
  const shared1 = await sharedInFlight(url, o.kind);
  const ttfts = results.map((r) => r.ttft_ms ?? wall);
  return {
    wall_ms: wall, ttft_p50_ms: median(ttfts), ttft_max_ms: Math.max(...ttfts),
    computed_tokens: computed, prompt_tokens: questions.length * (system.length + o.question),
    shared_in_flight_tokens: shared0 === null ? null : shared1 - shared0,
  };
}

// llama-server sends nothing until all of a burst's prompts are processed, which on a busy
// 2-core machine can take longer than fetch's default limits (300 s before the headers and
// between bytes of the body). Node's fetch (undici) takes no option for them without the undici
// package: its global agent (kept under this symbol since Node 18) is replaced by one without them.
async function noFetchTimeouts(url) {
  const key = Symbol.for('undici.globalDispatcher.1');
  await fetch(`${url}/health`);
  const Agent = globalThis[key]?.constructor;
  if (Agent) globalThis[key] = new Agent({ headersTimeout: 0, bodyTimeout: 0 });
}

async function run(url, o) {
  await noFetchTimeouts(url);
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 1800000 });
  o.model = (await (await fetch(`${url}/v1/models`)).json()).data[0].id;
  const system = ids(o.seed * 7919, o.system, 1000, o.vocab);
  const questions = (salt) => Array.from({ length: o.clients },
    (_, i) => ids(o.seed * 7919 + salt * 100 + i + 1, o.question, 1000, o.vocab));
  const cold = await burst(client, url, o, system, questions(1));
  const warm = await burst(client, url, o, system, questions(2));
  process.stderr.write(`${o.label} #${o.rep}: cold ${(cold.wall_ms / 1000).toFixed(2)} s ` +
    `(${cold.computed_tokens} computed), warm ${(warm.wall_ms / 1000).toFixed(2)} s ` +
    `(${warm.computed_tokens} computed)\n`);
  return { label: o.label, kind: o.kind, rep: o.rep, clients: o.clients, system: o.system,
    question: o.question, gen: o.gen, cold, warm };
}

function report(file) {
  const rows = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const labels = [...new Set(rows.map((r) => r.label))];
  const f = (x, d = 2) => (x === null || x === undefined || Number.isNaN(x) ? 'n/a' : x.toFixed(d));
  const r0 = rows[0];
  const lines = [
    `${r0.clients} clients at once, each a shared ${r0.system}-token prefix + its own ${r0.question}-token ` +
      `question, ${r0.gen} tokens out; medians of ${Math.max(...labels.map((l) => rows.filter((r) => r.label === l).length))} runs (each on a fresh server)`,
    '',
    '| Server | Burst | Wall (s) | TTFT p50 (s) | TTFT max (s) | Prompt tokens computed | Cold / warm wall | Runs (wall s) |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const label of labels) {
    const rs = rows.filter((r) => r.label === label);
    const ratio = median(rs.map((r) => r.cold.wall_ms / r.warm.wall_ms));
    for (const kind of ['cold', 'warm']) {
      const xs = rs.map((r) => r[kind]);
      lines.push(`| ${kind === 'cold' ? label : ''} | ${kind} | ${f(median(xs.map((x) => x.wall_ms)) / 1000)} | ` +
        `${f(median(xs.map((x) => x.ttft_p50_ms)) / 1000)} | ${f(median(xs.map((x) => x.ttft_max_ms)) / 1000)} | ` +
        `${median(xs.map((x) => x.computed_tokens))} of ${xs[0].prompt_tokens} | ` +
        `${kind === 'cold' ? f(ratio) + 'x' : ''} | ${xs.map((x) => f(x.wall_ms / 1000)).join(', ')} |`);
    }
  }
  console.log(lines.join('\n'));
}

async function main() {
  const a = args(process.argv.slice(2));
  const [mode, target] = a._;
  if (mode === 'report') return report(target);
  if (mode !== 'run' || !target) throw new Error('usage: bench_burst.mjs run URL --kind K | report FILE');
  const o = {
    kind: a.kind ?? 'promptcache', label: a.label ?? a.kind ?? 'promptcache', rep: Number(a.rep ?? 0),
    clients: Number(a.clients ?? 8), system: Number(a.system ?? 1000), question: Number(a.question ?? 16),
    gen: Number(a.gen ?? 32), seed: Number(a.seed ?? 1), vocab: Number(a.vocab ?? 40000),
  };
  console.log(JSON.stringify(await run(target, o)));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
