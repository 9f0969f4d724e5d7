#!/bin/bash
# The steps the serving probe scripts share (docs/benchmarks/*-serving-probes/run_sNN.sh source this from the
# repository root): unpacking carried binaries, the fp8 rows through the CLI (ab_rows, over the caller's FP8_ROWS),
# and the validation steps, each printing one summary line (logs under $OUT).
ROW64="--op paged --batch 64 --seqlen 4096 --heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --backend cuda --no-check"
ROW128="--op paged --batch 128 --seqlen 1024 --heads 32 --kv-heads 8 --head-dim 128 --block-size 16 --backend cuda --no-check"
unpack() { mkdir -p .devbin/gpu && tar -xJf .devbin/$1.tar.xz -C .devbin/gpu && B=.devbin/gpu/$1; }
# ab_rows "NAME=DIR ...": the fp8 rows (FP8_ROWS) on each build's flashgate, builds alternating, 2 rounds
ab_rows() {
  local r row b
  for r in 1 2; do for row in "${FP8_ROWS[@]}"; do for b in $1; do
    echo "$r ${row%%|*} ${b%%=*} $(${b#*=}/flashgate run ${row#*|} --iters 300 | grep -E '^time')"
  done; done; done
}
main_job() { $1/flashgate run > $OUT/main_job.log 2>&1; echo "main job rc=$? $(tail -1 $OUT/main_job.log)"; }
serving_suite() {
  timeout 240 $1/flashgate_gpu_tests --gtest_filter='*Decode*:*Paged*' > $OUT/gpu_tests.log 2>&1
  echo "serving rc=$? at ${SECONDS}s: $(grep -E 'PASSED|FAILED' $OUT/gpu_tests.log | head -3 | tr '\n' ' ')"
}
memcheck() {  # memcheck BINDIR FILTER
  timeout 240 compute-sanitizer --tool memcheck --print-limit 5 $1/flashgate_gpu_tests --gtest_brief=1 \
    --gtest_filter="$2" > $OUT/memcheck.log 2>&1
  echo "memcheck rc=$? at ${SECONDS}s: $(grep -E 'PASSED|FAILED|ERROR SUMMARY' $OUT/memcheck.log | tr '\n' ' ')"
}
racecheck() {  # racecheck BINDIR FILTER
  timeout 200 compute-sanitizer --tool racecheck --print-limit 20 $1/flashgate_gpu_tests --gtest_brief=1 \
    --gtest_filter="$2" > $OUT/racecheck.log 2>&1
  echo "racecheck rc=$? at ${SECONDS}s: $(grep -E 'PASSED|FAILED|RACECHECK SUMMARY' $OUT/racecheck.log | tr '\n' ' ')"
}
main_package() {  # this tree's Python package into .devbin/py/main
  rm -rf .devbin/py/main
  CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 300 python3 -m pip install -q --no-build-isolation --no-deps \
    --target .devbin/py/main -C build-dir=build-wheel/main -C cmake.define.FLASHGATE_CUDA_TARGETS=90a . \
    > $OUT/pip_main.log 2>&1
  echo "pip main rc=$? at ${SECONDS}s"
}
serving_bench() {  # the benchmark's serving rows with the package of main_package
  FLASHGATE_GIT_REV=$(cat .devbin/rev 2>/dev/null) PYTHONPATH=.devbin/py/main timeout 300 \
    python3 bench/run.py --out $OUT/bench --fla .peers --rows ctx > $OUT/bench.log 2>&1
  echo "bench rc=$? at ${SECONDS}s"
}
gpu_pytest() {
  PYTHONPATH=.devbin/py/main timeout 240 python3 -m pytest -q -ra tests/python > $OUT/pytest.log 2>&1
  echo "pytest rc=$? at ${SECONDS}s: $(tail -1 $OUT/pytest.log)"
}
