#!/usr/bin/env python3
"""Writes the ids llama-tokenize gives for each string of a conformance .inp file, one line each.

Usage: ik_tokenize.py VOCAB.gguf INP OUT   (LLAMA_TOKENIZE: the binary, default ik_llama.cpp's
build at /work/peers/ik_llama.cpp/build/bin/llama-tokenize). See README.md.
"""
import json
import os
import subprocess
import sys
import tempfile

BIN = os.environ.get("LLAMA_TOKENIZE", "/work/peers/ik_llama.cpp/build/bin/llama-tokenize")
SEP = "\n__ggml_vocab_test__\n"


def main():
    vocab, inp, out = sys.argv[1], sys.argv[2], sys.argv[3]
    parts = open(inp, "rb").read().decode("utf-8").split(SEP)
    if parts[-1] != "":
        sys.exit(f"{inp}: text after the last separator")
    lines = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "case.txt")
        for i, text in enumerate(parts[:-1]):
            with open(path, "wb") as f:
                f.write(text.encode("utf-8"))
            r = subprocess.run([BIN, "-m", vocab, "-f", path, "--ids", "--no-bos",
                                "--no-parse-special", "--log-disable"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"string {i}: {r.stderr}")
            ids = json.loads([l for l in r.stdout.splitlines() if l.startswith("[")][-1])
            lines.append(" ".join(str(x) for x in ids))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
