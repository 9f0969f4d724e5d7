#!/bin/bash
# Session 12 run 2: KV layout probe (main's package, built here).
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16 FLASHGATE_GIT_REV=$(cat .devbin/git_rev)
exec > >(tee $OUT/s12b.log) 2>&1
SECONDS=0
python3 -m pip install -q --no-build-isolation --no-deps -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . > $OUT/pip.log 2>&1; echo "pip rc=$? at ${SECONDS}s"
timeout 200 python3 .devbin/probe_s12b.py; echo "probe rc=$? ${SECONDS}s"
