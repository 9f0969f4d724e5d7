#!/bin/bash
# Session 12 run 4: page placement probe on branch next-at-once's package.
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=16 FLASHGATE_GIT_REV=$(cat .devbin/git_rev)
exec > >(tee $OUT/s12d.log) 2>&1
SECONDS=0
python3 -m pip install -q --no-build-isolation --no-deps -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . > $OUT/pip.log 2>&1; echo "pip rc=$? at ${SECONDS}s"
timeout 200 python3 .devbin/probe_s12d.py; echo "probe rc=$? ${SECONDS}s"
