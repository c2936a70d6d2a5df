// Constrained versus free generation: the same completion requests (seeded sampling, 128
// tokens, ignore_eos) without a grammar and with grammars that never end early, so that both
// generate every token; prints the generation rate of each (median tokens per second of
// generation time, from the server's timings) and the overhead, both from those rates and as
// the grammar's own time (timings.grammar_ms) over the rest of the generation time. Not a test
// (no .test.mjs suffix).
//
//   node bench_constrained.mjs URL [--tokens 128] [--requests 8]
import OpenAI from 'openai';

const argv = process.argv.slice(2);
const url = argv[0];
const opt = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};
const tokens = opt('tokens', 128), requests = opt('requests', 8);

// JSON text without an end: an array of strings, or of objects with a few typed fields.
const common = 'ws ::= | " " | "\\n" [ ]{0,8}\n' +
  'char ::= [^"\\\\\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})\n' +
  'string ::= "\\"" char* "\\""\ninteger ::= "-"? ("0" | [1-9] [0-9]{0,15})\n';
const grammars = {
  free: null,
  'strings array': 'root ::= "[" ws string (ws "," ws string)*\n' + common,
  'objects array': 'root ::= "[" ws obj (ws "," ws obj)*\n' +
    'obj ::= "{" ws "\\"name\\"" ws ":" ws string ws "," ws "\\"age\\"" ws ":" ws integer ws "," ws ' +
    '"\\"ok\\"" ws ":" ws ("true" | "false") ws "}"\n' + common,
};

const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600000 });
const model = (await client.models.list()).data[0].id;
// Interleaved (free, then each grammar, for every seed) so that the host's load changes
// affect all alike; the rate of each is the median over its requests.
const rates = Object.fromEntries(Object.keys(grammars).map((k) => [k, []]));
const generated = Object.fromEntries(Object.keys(grammars).map((k) => [k, 0]));
const grammarMs = Object.fromEntries(Object.keys(grammars).map((k) => [k, 0]));
const generationMs = Object.fromEntries(Object.keys(grammars).map((k) => [k, 0]));
for (let i = 0; i < requests; i++) {
  for (const [name, grammar] of Object.entries(grammars)) {
    const r = await client.completions.create({
      model, prompt: 'The data:', max_tokens: tokens, temperature: 1, seed: i + 1, ignore_eos: true,
      ...(grammar ? { grammar } : {}),
    });
    generated[name] += r.timings.generated_tokens;
    grammarMs[name] += r.timings.grammar_ms ?? 0;
    generationMs[name] += r.timings.generation_ms;
    rates[name].push(r.timings.generated_tokens * 1000 / r.timings.generation_ms);
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const results = {};
for (const name of Object.keys(grammars)) {
  results[name] = { generated: generated[name], tokens_per_second: +median(rates[name]).toFixed(1) };
}
for (const name of Object.keys(grammars)) {
  if (name === 'free') continue;
  results[name].overhead_percent =
    +((results.free.tokens_per_second / results[name].tokens_per_second - 1) * 100).toFixed(1);
  // The grammar's own work (token checks, masks, the second draw) against the rest of the
  // generation time: the overhead without the host's noise.
  results[name].grammar_ms_per_token = +(grammarMs[name] / generated[name]).toFixed(3);
  results[name].grammar_share_percent =
    +(grammarMs[name] / (generationMs[name] - grammarMs[name]) * 100).toFixed(1);
}
console.log(JSON.stringify(results));
