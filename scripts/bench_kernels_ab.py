#!/usr/bin/env python3
"""Before/after timing of two ops_bench builds, with the noise measured rather than guessed.

  bench_kernels_ab.py --before OLD/ops_bench --after NEW/ops_bench --filter REGEX
                      [--rounds 12] [--repetitions 3] [--cpu 1] [--jsonl FILE] [extra ops_bench args]

A kernel change is "no slower" only against the spread of the measurement itself. So beside the
two binaries this runs a third: a byte-identical copy of the *before* binary, under another file
name (an A/A control). Each round runs the three, pinned to one CPU, in an order that rotates
from round to round (so no binary always runs first, after an idle gap, or right after another),
and keeps every repetition's thread CPU time. The table then gives, per benchmark, after/before
and copy/before, both as ratios of medians and of minimums: a difference no larger than the
copy's is noise on this machine at this hour.

Extra arguments after the options (e.g. --isa=AVX2) go to every ops_bench run. --jsonl keeps the
raw samples (one JSON object per repetition), and --report FILE re-prints the table from them.
Standard library only; needs `taskset` (util-linux).
"""
import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

SIDES = ("before", "copy", "after")


def run_once(binary, side, args, cpu):
    cmd = ["taskset", "-c", str(cpu), binary, "--benchmark_filter=" + args.filter,
           "--benchmark_repetitions=%d" % args.repetitions, "--benchmark_format=json"] + args.extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") == "iteration":
            yield {"side": side, "name": b["run_name"], "cpu_us": b["cpu_time"]}


def measure(args):
    tmp = tempfile.mkdtemp(prefix="kernels_ab.")
    try:
        # The control is a copy with its own path, so it is loaded (and placed) like another binary.
        binaries = {"before": args.before, "after": args.after,
                    "copy": shutil.copy(args.before, os.path.join(tmp, "ops_bench_copy"))}
        samples = []
        for r in range(args.rounds):
            order = SIDES[r % 3:] + SIDES[:r % 3]
            for side in order:
                samples.extend(run_once(binaries[side], side, args, args.cpu))
            print("round %d/%d done (load %.2f)" % (r + 1, args.rounds, os.getloadavg()[0]),
                  file=sys.stderr)
        return samples
    finally:
        shutil.rmtree(tmp)


def report(samples):
    by = collections.defaultdict(list)
    for s in samples:
        by[(s["name"], s["side"])].append(s["cpu_us"])
    names = sorted({s["name"] for s in samples})
    print("| benchmark | n | before (us, median) | after | after/before median | min "
          "| A/A copy/before median | min |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        b, a, c = (by[(name, side)] for side in ("before", "after", "copy"))
        if not (a and b and c):
            continue
        med = statistics.median
        print("| %s | %d | %.0f | %.0f | %.3f | %.3f | %.3f | %.3f |" %
              (name, min(len(a), len(b), len(c)), med(b), med(a), med(a) / med(b),
               min(a) / min(b), med(c) / med(b), min(c) / min(b)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before")
    p.add_argument("--after")
    p.add_argument("--filter", default="BM_MatMul/")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--cpu", type=int, default=1)
    p.add_argument("--jsonl", help="also write the raw samples here")
    p.add_argument("--report", help="print the table of an earlier --jsonl file and exit")
    args, args.extra = p.parse_known_args()
    if args.report:
        with open(args.report) as f:
            report([json.loads(line) for line in f if line.strip()])
        return 0
    for flag in ("before", "after"):
        path = getattr(args, flag)
        if not path or not os.access(path, os.X_OK):
            p.error("--%s must name an ops_bench binary" % flag)
    if args.rounds < 1 or args.repetitions < 1:
        p.error("--rounds and --repetitions must be at least 1")
    load0 = os.getloadavg()
    samples = measure(args)
    if args.jsonl:
        with open(args.jsonl, "w") as f:
            f.writelines(json.dumps(s) + "\n" for s in samples)
    report(samples)
    print("\n(load average %.2f at the start, %.2f at the end; %d rounds x %d repetitions, CPU %d)"
          % (load0[0], os.getloadavg()[0], args.rounds, args.repetitions, args.cpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
