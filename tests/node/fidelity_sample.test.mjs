// --fidelity-sample through the server: modular (PML) requests that reuse cached modules are
// evaluated in the background against the full recompute, and /metrics reports it
// (promptcache_fidelity_*). The sampled figures are checked against the response's own
// "evaluate": true report for the same request (the server's other path to the same
// comparison: the contiguous baseline). A plain prompt is never sampled, and a bad flag value is
// refused at start with a one-line error.
//
// Mutations tried: modular prompts left out of the sampling (only segment hits eligible): no
// sample comes and the second test fails; segment hits left out (only modules eligible): the
// segment test fails. (The metrics' arithmetic is metrics_test's.)
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, parseMetrics, waitFor, MODEL } from './server.mjs';

const EXAMPLES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/story');
const RAG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../examples/rag/stories');
const DOCS = fs.readFileSync(path.join(RAG, 'docs.txt'), 'utf8').split(/\n---\n/).map((d) => d.trim());
const STORY_XML = fs.readFileSync(path.join(EXAMPLES, 'story.xml'), 'utf8');
const LILY_XML = fs.readFileSync(path.join(EXAMPLES, 'lily.xml'), 'utf8');

// 16 tokens: the steps a sampled request keeps (kFidelitySampleSteps), so that the evaluate
// report covers the same steps.
const greedy = { model: MODEL, max_tokens: 16, temperature: 0, ignore_eos: true };

async function metrics(server) {
  const r = await fetch(server.url + '/metrics');
  assert.equal(r.status, 200);
  return parseMetrics(await r.text());
}

let server;
before(async () => {
  server = await startServer(['--parallel', '2', '--fidelity-sample', '1']);
  const r = await server.json('POST', '/v1/schemas', STORY_XML, { 'content-type': 'application/xml' });
  assert.equal(r.status, 200, r.text);
});

test('a plain prompt is never sampled; before any sample the ratios are NaN', async () => {
  for (let i = 0; i < 2; ++i) {  // the second is a prefix hit: exact, not sampled either
    const r = await server.json('POST', '/v1/completions', { ...greedy, prompt: 'Once upon a time, there was a girl' });
    assert.equal(r.status, 200, r.text);
  }
  const m = await metrics(server);
  assert.equal(m.promptcache_fidelity_samples_total, 0);
  assert.equal(m.promptcache_fidelity_pending, 0, 'a sample is queued before its request answers');
  assert.equal(m.promptcache_fidelity_dropped_total, 0);
  assert.ok(Number.isNaN(m.promptcache_fidelity_top1_margin_aware));
});

test('modular requests are sampled and /metrics shows their fidelity', async () => {
  // "evaluate": the server's own comparison of this response with the full recompute.
  const r = await server.json('POST', '/v1/completions', { ...greedy, prompt: LILY_XML, evaluate: true });
  assert.equal(r.status, 200, r.text);
  assert.ok(r.body.usage.prompt_tokens_details.cached_tokens > 0, 'reused the modules');
  const ev = r.body.fidelity.contiguous;
  assert.equal(ev.steps, 16, JSON.stringify(r.body.fidelity));
  let m;
  const came = await waitFor(async () => (m = await metrics(server)).promptcache_fidelity_samples_total >= 1,
                             { timeoutMs: 60000 });
  assert.ok(came, 'the sample was evaluated within 60 s');
  assert.equal(m.promptcache_fidelity_samples_total, 1);
  assert.equal(m.promptcache_fidelity_pending, 0);
  assert.equal(m.promptcache_fidelity_dropped_total, 0);
  for (const k of ['promptcache_fidelity_top1_margin_aware', 'promptcache_fidelity_top1']) {
    assert.ok(m[k] >= 0 && m[k] <= 1, `${k} = ${m[k]}`);
  }
  // The same request, the same steps, the same baseline: the figures agree.
  assert.ok(Math.abs(m.promptcache_fidelity_top1 - ev.top1_agreement) < 1e-6,
            `${m.promptcache_fidelity_top1} vs evaluate ${ev.top1_agreement}`);
  assert.ok(Math.abs(m.promptcache_fidelity_first_token_kl_mean - ev.first_token_kl) <= 1e-6 * (1 + ev.first_token_kl),
            `${m.promptcache_fidelity_first_token_kl_mean} vs evaluate ${ev.first_token_kl}`);
  assert.equal(m.promptcache_fidelity_first_token_kl_max, m.promptcache_fidelity_first_token_kl_mean);

  // More modular requests through the chat-style fields: each is sampled (N = 1).
  for (const modules of [['tim', 'lake'], ['sue', 'park']]) {
    const q = await server.json('POST', '/v1/completions', { ...greedy, schema: 'story', modules, prompt: '\nOne day,' });
    assert.equal(q.status, 200, q.text);
  }
  assert.ok(await waitFor(async () => {
    m = await metrics(server);
    return m.promptcache_fidelity_samples_total + m.promptcache_fidelity_dropped_total >= 3 &&
        m.promptcache_fidelity_pending === 0;
  }, { timeoutMs: 60000 }), JSON.stringify(m));
  assert.ok(m.promptcache_fidelity_samples_total >= 1);
  for (const k of ['promptcache_fidelity_top1_margin_aware', 'promptcache_fidelity_top1']) {
    assert.ok(m[k] >= 0 && m[k] <= 1, `${k} = ${m[k]}`);
  }
  assert.ok(m.promptcache_fidelity_first_token_kl_mean >= 0);
});

test('a chat request reusing a segment is sampled; its figures match its evaluate report', async () => {
  // Through the official openai client, segments asked for by the request ("cache_segments"),
  // the server started without --segment-cache; "recompute": 0 so that the reuse is inexact.
  const seg = await startServer(['--fidelity-sample', '1', '--segment-min-tokens', '16']);
  const ask = (docs, evaluate) => seg.client().chat.completions.create({
    ...greedy, cache_segments: true, recompute: 0, evaluate,
    messages: [{ role: 'user', content: [...docs.map((d) => ({ type: 'text', text: d })),
                                         { type: 'text', text: 'Who was in the park?' }] }],
  });
  await ask([DOCS[0], DOCS[1]], false);  // stores both documents; nothing reused: not sampled
  let m = await metrics(seg);
  assert.equal(m.promptcache_fidelity_samples_total + m.promptcache_fidelity_pending, 0);
  const r = await ask([DOCS[2], DOCS[0]], true);  // document 0 at another position
  assert.ok(r.timings.segment_hits >= 1, JSON.stringify(r.timings));
  const ev = r.fidelity.contiguous;
  assert.equal(ev.steps, 16, JSON.stringify(r.fidelity));
  assert.ok(await waitFor(async () => (m = await metrics(seg)).promptcache_fidelity_samples_total >= 1,
                          { timeoutMs: 60000 }), 'the sample was evaluated within 60 s');
  assert.equal(m.promptcache_fidelity_samples_total, 1);
  assert.ok(Math.abs(m.promptcache_fidelity_top1 - ev.top1_agreement) < 1e-6,
            `${m.promptcache_fidelity_top1} vs evaluate ${ev.top1_agreement}`);
  assert.ok(Math.abs(m.promptcache_fidelity_top1_margin_aware - ev.margin_top1_agreement) < 1e-6,
            `${m.promptcache_fidelity_top1_margin_aware} vs evaluate ${ev.margin_top1_agreement}`);
  assert.ok(Math.abs(m.promptcache_fidelity_first_token_kl_mean - ev.first_token_kl) <= 1e-6 * (1 + ev.first_token_kl));
  assert.ok(ev.first_token_kl > 0, 'a reused segment is an approximation');
});

test('a bad --fidelity-sample is refused at start', async () => {
  await assert.rejects(startServer(['--fidelity-sample', '-1'], { timeoutMs: 10000 }),
                       (e) => /fidelity-sample/.test(e.message));
});
