// Scoring continuations as evaluation harnesses do (lm-eval's local-completions): 100 requests,
// each a ~2,000-token shared context plus one of 100 short continuations, sent as completions
// with echo, logprobs 1 and max_tokens 0; the continuation's score is the sum of its tokens'
// log-probabilities. Prints one JSON line: total time, requests per second, and the prompt
// tokens the server computed versus took from the cache. Not a test (no .test.mjs suffix).
//
//   node bench_scoring.mjs URL [--context 2000] [--choices 100] [--concurrency 1]
import OpenAI from 'openai';
import { args } from './args.mjs';

const a = args(process.argv.slice(2));
const url = a._[0];
const contextTokens = Number(a.context ?? 2000);
const choices = Number(a.choices ?? 100);
const concurrency = Number(a.concurrency ?? 1);

// Token ids from a seeded generator over the ordinary part of the vocabulary: exact lengths.
function ids(seed, n) {
  let s = seed >>> 0;
  const out = [];
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out.push(300 + (s % 20000));
  }
  return out;
}

const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600000 });
const model = (await client.models.list()).data[0].id;
const context = ids(1, contextTokens);
const endings = Array.from({ length: choices }, (_, i) => ids(1000 + i, 4 + (i % 5)));

let cached = 0, computed = 0, next = 0;
const scores = new Array(choices);
const start = performance.now();
async function worker() {
  while (next < choices) {
    const i = next++;
    const prompt = [...context, ...endings[i]];
    const r = await client.completions.create({
      model, prompt, max_tokens: 0, echo: true, logprobs: 1, temperature: 0,
    });
    const lp = r.choices[0].logprobs.token_logprobs;
    scores[i] = lp.slice(context.length).reduce((s, x) => s + x, 0);
    cached += r.usage.prompt_tokens_details.cached_tokens;
    computed += r.timings.computed_tokens;
  }
}
await Promise.all(Array.from({ length: concurrency }, worker));
const seconds = (performance.now() - start) / 1000;
const best = scores.indexOf(Math.max(...scores));
console.log(JSON.stringify({
  requests: choices, context_tokens: contextTokens, seconds: +seconds.toFixed(2),
  requests_per_second: +(choices / seconds).toFixed(2), cached_tokens: cached,
  computed_tokens: computed, best_choice: best,
}));
