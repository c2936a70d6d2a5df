#!/usr/bin/env python3
"""How many prompts a fixed --cache-ram holds with each --kv-type (docs/benchmarks.md).

Starts `promptcache serve` once per KV type with the same --cache-ram, sends N distinct prompts of
L random tokens each (max_tokens 1, so each prompt's prefix is cached), then counts the prompts
whose every cached block is still in RAM (GET /v1/cache) and the tokens held.
Usage: examples/bench/kv_capacity.py [BIN] [MODEL] [CACHE_MIB] [PROMPTS] [TOKENS]
(from the repository root).
"""
import json
import random
import socket
import subprocess
import sys
import time
import urllib.request

BIN = sys.argv[1] if len(sys.argv) > 1 else "./build/promptcache"
MODEL = sys.argv[2] if len(sys.argv) > 2 else "/work/models/smollm2-135m-q8_0.gguf"
CACHE_MIB = sys.argv[3] if len(sys.argv) > 3 else "16"
PROMPTS = int(sys.argv[4]) if len(sys.argv) > 4 else 40
TOKENS = int(sys.argv[5]) if len(sys.argv) > 5 else 512


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def measure(kv_type):
    port = free_port()
    server = subprocess.Popen([BIN, "serve", "-m", MODEL, "-t", "2", "--port", str(port),
                               "--kv-type", kv_type, "--cache-ram", CACHE_MIB, "--parallel", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                model = call(port, "/v1/models")["data"][0]
                meta = model["meta"]
                break
            except OSError:
                time.sleep(0.1)
        rng = random.Random(1)
        for _ in range(PROMPTS):
            prompt = [rng.randrange(1000, 40000) for _ in range(TOKENS)]
            call(port, "/v1/completions",
                 {"model": model["id"], "prompt": prompt, "max_tokens": 1, "temperature": 0})
        entries = call(port, "/v1/cache")["data"]
        # A prompt is held whole when its chain keeps every cacheable block (the last token is
        # always computed: (TOKENS - 1) // block * block tokens); LRU eviction takes a chain's
        # leaves first, so a partly evicted prompt keeps a shorter entry.
        whole = (TOKENS - 1) // meta["cache_block_tokens"] * meta["cache_block_tokens"]
        held = sum(1 for e in entries if e["in_ram"] and e["tokens"] >= whole)
        tokens = sum(e["tokens"] for e in entries if e["in_ram"])
        return meta["kv_bytes_per_token"], held, tokens
    finally:
        server.terminate()
        server.wait()


print(f"--cache-ram {CACHE_MIB} MiB, {PROMPTS} prompts of {TOKENS} tokens, {MODEL}")
for kv in ("f16", "q8_0", "q4_0"):
    bpt, held, tokens = measure(kv)
    print(f"{kv:5s} {bpt:6d} bytes/token: {held} of {PROMPTS} prompts held whole, "
          f"{tokens} tokens in RAM")
