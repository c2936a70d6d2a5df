#!/usr/bin/env bash
# Issue 32's many-core measurement, prepared so that a machine lent for a few minutes spends them
# measuring, not building. Two steps:
#
#   scripts/device_scaling.sh pack PACK.tar.xz [LLAMA_BIN_DIR] [IK_BIN_DIR]
#     here: build/promptcache (a Release build), the peers' llama-bench and llama-quantize with
#     their own libraries (default /work/peers/{llama.cpp,ik_llama.cpp}/build/bin), every shared
#     library they load that is not the C library's, and GPT-2's vocabulary, in one xz archive
#     (a few MiB: it travels with the working tree to the other machine).
#
#   scripts/device_scaling.sh run PACK.tar.xz OUT_DIR [small|large|all|quick]
#     there, from the repository root: unpacks (build/promptcache becomes a wrapper that runs the
#     packed binary), makes the files (`promptcache synth` writes each shape's F16 file with random
#     weights and the real vocabulary, llama.cpp's llama-quantize each type) and runs
#     scripts/bench_scaling.sh with every engine and profiles into OUT_DIR:
#       small: smollm2-135m Q8_0, threads 1 2 4 8 16, pp512 / tg128
#       large: llama3.2-1b Q8_0 and Q4_K_M, threads 4 8 16, pp512 / tg64
#       all: both (longer than one 10-minute command: run small and large apart)
#       quick: smollm2-135m Q8_0, threads 1 2, pp64 / tg16, one round (to try the script anywhere)
#     ROUNDS (default 2) and THREADS override the phase's. OUT_DIR gets machine.txt (lscpu, the
#     load), scaling-PHASE.md (bench_scaling.sh's tables), raw-PHASE.tsv (each run's rate as it
#     ends: what a phase cut short had measured) and profiles/.
# The numbers belong in docs/benchmarks.md with the machine and the commit.
set -euo pipefail
cd "$(dirname "$0")/.."

pack() {
  local out=${1:?usage: device_scaling.sh pack PACK.tar.xz [LLAMA_BIN_DIR] [IK_BIN_DIR]}
  local llama=${2:-/work/peers/llama.cpp/build/bin} ik=${3:-/work/peers/ik_llama.cpp/build/bin}
  [ -x build/promptcache ] || { echo "device_scaling: build build/promptcache first" >&2; exit 1; }
  local stage
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  mkdir -p "$stage/bin" "$stage/lib" "$stage/vocab"
  cp build/promptcache "$stage/bin/promptcache"
  cp ../shared/tokenizers/ggml-vocab-gpt-2.gguf "$stage/vocab/"
  local name dir tool
  for pair in "llama.cpp=$llama" "ik_llama.cpp=$ik"; do
    name=${pair%%=*}
    dir=${pair#*=}
    [ -x "$dir/llama-bench" ] || { echo "device_scaling: no $name in $dir (skipped)" >&2; continue; }
    mkdir -p "$stage/$name/lib"
    for tool in llama-bench llama-quantize; do
      if [ -x "$dir/$tool" ]; then cp "$dir/$tool" "$stage/$name/"; fi
    done
    # The peer's own libraries (llama.cpp's and ik_llama.cpp's share names: each keeps its own).
    ldd "$dir/llama-bench" | awk '/=> \// {print $3}' | grep -E 'libllama|libggml' |
      xargs -r cp -t "$stage/$name/lib/"
  done
  # Every other library the binaries load, but the C library's own (the other machine has one,
  # and it must be at least this one's).
  for b in "$stage/bin/promptcache" "$stage"/*/llama-bench; do
    [ -e "$b" ] || continue
    ldd "$b" | awk '/=> \// {print $3}' | grep -v -E 'libllama|libggml' |
      grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | xargs -r cp -n -t "$stage/lib/"
  done
  echo "$(git rev-parse --short HEAD) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" \
    >"$stage/BUILT_AT"
  tar -C "$stage" -cJf "$out" .
  echo "device_scaling: $out $(du -h "$out" | cut -f1)"
}

# A wrapper at $1 that runs the real binary $2 with the libraries in $3 first.
wrap() {
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$3" "$2" >"$1"
  chmod +x "$1"
}

run() {
  local archive=${1:?usage: device_scaling.sh run PACK.tar.xz OUT_DIR [small|large|all|quick]}
  local out=${2:?usage: device_scaling.sh run PACK.tar.xz OUT_DIR [small|large|all|quick]}
  local phase=${3:-small}
  local root=${SCALING_ROOT:-/tmp/promptcache-scaling}
  mkdir -p "$root" "$out/profiles"
  tar -C "$root" -xJf "$archive"
  local peers=() name
  for name in llama.cpp ik_llama.cpp; do
    [ -d "$root/$name" ] || continue
    mkdir -p "$root/wrapped/$name"
    for tool in llama-bench llama-quantize; do
      if [ -x "$root/$name/$tool" ]; then
        wrap "$root/wrapped/$name/$tool" "$root/$name/$tool" "$root/$name/lib:$root/lib"
      fi
    done
    # A peer that cannot start here (an instruction this CPU lacks, a library) is left out.
    if "$root/wrapped/$name/llama-bench" --help >/dev/null 2>&1; then
      peers+=("$name")
    else
      echo "device_scaling: $name does not run on this machine (left out)" >&2
    fi
  done
  mkdir -p build
  if [ -e build/promptcache ]; then mv build/promptcache build/promptcache.before-device-scaling; fi
  wrap build/promptcache "$root/bin/promptcache" "$root/lib"
  { lscpu; echo; cat "$root/BUILT_AT"; echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)";
    echo "peers: ${peers[*]:-none}"; } >"$out/machine.txt"
  local args=(-d "$root/models" -P "$out/profiles" -r "${ROUNDS:-2}")
  local vocab=$root/vocab/ggml-vocab-gpt-2.gguf
  args+=(-V "smollm2-135m=$vocab llama3.2-1b=$vocab")
  for name in "${peers[@]}"; do
    case $name in
      llama.cpp) args+=(-l "$root/wrapped/llama.cpp") ;;
      ik_llama.cpp) args+=(-k "$root/wrapped/ik_llama.cpp") ;;
    esac
  done
  local phases=("$phase")
  [ "$phase" = all ] && phases=(small large)
  for p in "${phases[@]}"; do
    case $p in
      small) set -- -s smollm2-135m -q Q8_0 -T "${THREADS:-1 2 4 8 16}" -p 512 -n 128 ;;
      large) set -- -s llama3.2-1b -q "Q8_0 Q4_K_M" -T "${THREADS:-4 8 16}" -p 512 -n 64 ;;
      quick) set -- -s smollm2-135m -q Q8_0 -T "${THREADS:-1 2}" -p 64 -n 16 -r 1 ;;
      *) echo "device_scaling: unknown phase '$p' (small, large, all, quick)" >&2; exit 2 ;;
    esac
    SCALING_RAW=$out/raw-$p.tsv scripts/bench_scaling.sh "${args[@]}" "$@" >"$out/scaling-$p.md" \
      2>"$out/scaling-$p.log"
    cat "$out/scaling-$p.md"
  done
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,23p' "$0"; exit 2 ;;
esac
