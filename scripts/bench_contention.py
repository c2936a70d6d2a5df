#!/usr/bin/env python3
"""Client side of scripts/bench_contention.sh (standard library only).

  bench_contention.py fill URL --prefix-seed P [--prefix N] [--ending N]
      Puts the prefix (--prefix pseudo-random token ids drawn from --prefix-seed) in the server's
      cache: one cold request for 1 token, whose time is printed on stderr.
  bench_contention.py measure URL --engine NAME --load LOAD --prefix-seed P --seed S
                      [--prefix N] [--ending N] [--gen N]
      One measurement against a running server (promptcache serve or llama-server) whose cache
      holds that prefix, printed as one JSON line: the prefix with a new ending of --ending ids
      (drawn from --seed) for 1 token: the warm time to first token (the request's wall time, so
      it counts the same for every engine, HTTP included); then with another new ending for
      1 + --gen tokens: the decode rate, --gen tokens over the difference of the two times. Both
      servers take the same OpenAI-style request: /v1/completions with token ids, ignore_eos,
      temperature 0.
  bench_contention.py report FILE.jsonl
      The Markdown table: per engine, idle and loaded warm TTFT and decode rate (median, min-max)
      and the slowdown, then promptcache against llama-server.
"""
import json
import random
import statistics
import sys
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as res:
        out = json.loads(res.read())
    return (time.perf_counter() - t0) * 1000, out


def model_id(url):
    with urllib.request.urlopen(url + "/v1/models", timeout=60) as res:
        return json.loads(res.read())["data"][0]["id"]


def complete(url, model, ids, n):
    ms, out = post(url, {"model": model, "prompt": ids, "max_tokens": n, "temperature": 0,
                         "ignore_eos": True, "cache_prompt": True, "stream": False})
    got = out.get("usage", {}).get("completion_tokens")
    if got is not None and got != n:
        raise SystemExit(f"bench_contention: asked for {n} tokens, got {got} (ignore_eos?)")
    usage = out.get("usage", {})
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    computed = (out.get("timings") or {}).get("prompt_n")  # llama-server: prompt tokens computed
    return ms, cached, computed


# Ordinary token ids of the GPT-2 vocabulary (the synthetic files' vocabulary).
def ids(seed, n):
    rnd = random.Random(seed)
    return [rnd.randrange(1000, 30000) for _ in range(n)]


def fill(url, prefix_seed, prefix_n, ending_n):
    prompt = ids(f"prefix {prefix_seed}", prefix_n) + ids("fill", ending_n)
    ms, _, _ = complete(url, model_id(url), prompt, 1)
    print(f"  cold {prefix_n + ending_n}-token prompt: {ms:.0f} ms", file=sys.stderr)


def measure(url, engine, load, prefix_seed, seed, prefix_n, ending_n, gen):
    prefix = ids(f"prefix {prefix_seed}", prefix_n)
    model = model_id(url)
    warm_ms, cached, computed = complete(url, model, prefix + ids(f"ttft {seed}", ending_n), 1)
    gen_ms, _, _ = complete(url, model, prefix + ids(f"decode {seed}", ending_n), 1 + gen)
    decode_tps = gen * 1000 / (gen_ms - warm_ms) if gen_ms > warm_ms else None
    row = {"engine": engine, "load": load, "seed": seed, "prefix": prefix_n, "ending": ending_n,
           "gen": gen, "warm_ttft_ms": warm_ms, "gen_ms": gen_ms, "decode_tps": decode_tps,
           "cached_tokens": cached, "computed_tokens": computed}
    print(json.dumps(row))
    print(f"  {engine} {load}: warm TTFT {warm_ms:.1f} ms, decode {decode_tps or 0:.1f} tok/s "
          f"(cached {cached}, computed {computed})", file=sys.stderr)


def report(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    engines = list(dict.fromkeys(r["engine"] for r in rows))

    def values(engine, load, key):
        return [r[key] for r in rows if r["engine"] == engine and r["load"] == load and
                r[key] is not None]

    def cell(v, d):
        if not v:
            return "n/a"
        return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}-{max(v):.{d}f})"

    def med(v):
        return statistics.median(v) if v else None

    def ratio(a, b, d=2):
        return "n/a" if a is None or not b else f"{a / b:.{d}f}x"

    print("| engine | warm TTFT idle ms | warm TTFT loaded ms | TTFT loaded/idle | "
          "decode idle tok/s | decode loaded tok/s | decode loaded/idle | runs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    summary = {}
    for e in engines:
        ti, tl = values(e, "idle", "warm_ttft_ms"), values(e, "loaded", "warm_ttft_ms")
        di, dl = values(e, "idle", "decode_tps"), values(e, "loaded", "decode_tps")
        summary[e] = (med(ti), med(tl), med(di), med(dl))
        print(f"| {e} | {cell(ti, 1)} | {cell(tl, 1)} | {ratio(med(tl), med(ti))} | "
              f"{cell(di, 1)} | {cell(dl, 1)} | {ratio(med(dl), med(di))} | "
              f"{len(ti)} + {len(tl)} |")
    # The goal: under load, ours degrades no more than llama-server's.
    slow = lambda s: (s[1] / s[0] if s[0] and s[1] else None,
                      s[2] / s[3] if s[2] and s[3] else None)
    for other in ("llama-server", "promptcache-base"):
        if "promptcache" not in summary or other not in summary:
            continue
        o, l = summary["promptcache"], summary[other]
        print(f"| promptcache / {other} | {ratio(o[0], l[0])} | {ratio(o[1], l[1])} | | "
              f"{ratio(o[2], l[2])} | {ratio(o[3], l[3])} | | |")
    lines = []
    for e in summary:
        t, d = slow(summary[e])
        if t is not None and d is not None:
            lines.append(f"{e}: warm TTFT {t:.2f}x longer, decode {d:.2f}x slower")
    if lines:
        print("\nslowdown under load: " + "; ".join(lines))


def main():
    args = sys.argv[1:]
    if not args:
        raise SystemExit(__doc__)
    if args[0] == "report":
        return report(args[1])
    url, opts = args[1], dict(zip(args[2::2], args[3::2]))
    prefix_n, ending_n = int(opts.get("--prefix", 3290)), int(opts.get("--ending", 10))
    if args[0] == "fill":
        return fill(url, int(opts["--prefix-seed"]), prefix_n, ending_n)
    if args[0] != "measure":
        raise SystemExit(f"bench_contention.py: unknown command '{args[0]}'")
    measure(url, opts["--engine"], opts["--load"], int(opts["--prefix-seed"]), int(opts["--seed"]),
            prefix_n, ending_n, int(opts.get("--gen", 64)))


if __name__ == "__main__":
    main()
