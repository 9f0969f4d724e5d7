#!/usr/bin/env bash
# Sets up (configure + build) and runs the main job: `flashgate run` on its default problem, on the GPU when
# one is present, else on the CPU. Extra arguments go to `flashgate run`.
# Builds the CLI target only and leaves the rest of build/'s CMake cache as it is (FLASHGATE_TESTS included):
# scripts/test.sh shares build/ and sets what it needs itself, so the two run in either order.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target flashgate_cli -j "$(nproc)"
exec ./build/flashgate run "$@"
