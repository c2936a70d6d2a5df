#!/usr/bin/env python3
"""Writes a copy of a vocabulary-only GGUF file with tokenizer.ggml.pre replaced.

Usage: make_gpt4o_vocab.py IN.gguf OUT.gguf [PRE]   (PRE defaults to gpt-4o)

Only the metadata changes; the file must have no tensors (ggml-vocab-*.gguf files have none), so
nothing after the metadata needs moving. Used to make the input of ik_llama.cpp's llama-tokenize
for gpt4o-*.out (ik_tokenize.py, README.md); the test itself makes its copy with GgufWriter.
"""
import struct
import sys

KEY = b"tokenizer.ggml.pre"
STRING = 8


def main():
    src, dst = sys.argv[1], sys.argv[2]
    pre = (sys.argv[3] if len(sys.argv) > 3 else "gpt-4o").encode()
    data = open(src, "rb").read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    if magic != b"GGUF" or n_tensors != 0:
        sys.exit(f"{src}: expected a GGUF file without tensors")
    key = struct.pack("<Q", len(KEY)) + KEY
    at = data.find(key)
    if at < 0:
        sys.exit(f"{src}: no {KEY.decode()} key")
    value = at + len(key)
    (vtype,) = struct.unpack_from("<I", data, value)
    (old_len,) = struct.unpack_from("<Q", data, value + 4)
    if vtype != STRING:
        sys.exit(f"{src}: {KEY.decode()} is not a string")
    start = value + 12
    out = data[:value + 4] + struct.pack("<Q", len(pre)) + pre + data[start + old_len:]
    open(dst, "wb").write(out)


if __name__ == "__main__":
    main()
