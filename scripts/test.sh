#!/usr/bin/env bash
# Builds everything and runs every test: the fuzz targets (a clang build with libFuzzer and
# sanitizers, each fuzzed briefly) and then the unit and integration tests of the release build.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DPC_FUZZ=ON >/dev/null
cmake --build build-fuzz --target pc_fuzzers
ctest --test-dir build-fuzz --output-on-failure -j2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
ctest --test-dir build --output-on-failure -j2 "$@"
