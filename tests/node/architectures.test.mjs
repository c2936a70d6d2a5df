// The server on the other architectures: synth's tiny fixtures of Gemma 3 (sliding windows of 24
// tokens, five sliding layers to one global), Qwen3, and the mixtures of experts Qwen3-MoE,
// Qwen2-MoE (with a shared expert), Mixtral and gpt-oss (8 experts, 2 per token; gpt-oss with 16-token windows on alternate layers,
// attention sinks and YaRN), written at test time with stories260K's vocabulary. A prompt several windows long is answered the same way cold and from the prefix
// cache, streamed or not, and a second request sharing its start reuses it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { BIN, SHARED, STORY, startServer } from './server.mjs';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-arch-'));
process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));

function synth(preset) {
  const out = path.join(dir, `${preset}.gguf`);
  execFileSync(BIN, ['synth', '--preset', preset, '--vocab', path.join(SHARED, 'models', 'stories260K.gguf'),
    '--type', 'q8_0', '-o', out], { stdio: 'ignore' });
  return out;
}

for (const preset of ['tiny-gemma3', 'tiny-qwen3', 'tiny-qwen3moe', 'tiny-qwen2moe', 'tiny-mixtral',
  'tiny-gpt-oss']) {
  test(`${preset}: cold, cached and streamed answers agree; a shared start is reused`, async () => {
    const s = await startServer([], { model: synth(preset) });
    const client = s.client();
    const models = await (await fetch(`${s.url}/v1/models`)).json();
    assert.ok(models.data[0].meta.kv_bytes_per_token > 0);
    const model = models.data[0].id;
    const ask = (prompt, stream = false) => client.completions.create(
      { model, prompt, max_tokens: 16, temperature: 0, ignore_eos: true, stream });
    const cold = await ask(STORY);
    assert.ok(cold.usage.prompt_tokens > 3 * 24, `prompt of ${cold.usage.prompt_tokens} tokens`);
    assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
    const warm = await ask(STORY);
    assert.ok(warm.usage.prompt_tokens_details.cached_tokens >= cold.usage.prompt_tokens - 16);
    assert.equal(warm.choices[0].text, cold.choices[0].text);
    let streamed = '';
    for await (const chunk of await ask(STORY, true)) streamed += chunk.choices[0]?.text ?? '';
    assert.equal(streamed, cold.choices[0].text);
    const other = await ask(STORY + ' The end.');
    assert.ok(other.usage.prompt_tokens_details.cached_tokens >= cold.usage.prompt_tokens - 16);
  });
}
