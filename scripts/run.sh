#!/usr/bin/env bash
# Sets up (configure + build) and runs the main job: `flashgate run` on its default problem, on the GPU when
# one is present, else on the CPU. Extra arguments go to `flashgate run`.
set -euo pipefail
cd "$(dirname "$0")/.."
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFLASHGATE_TESTS=OFF >/dev/null
cmake --build build --target flashgate_cli -j "$(nproc)"
exec ./build/flashgate run "$@"
