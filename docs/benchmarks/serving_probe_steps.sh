#!/bin/bash
# The steps the serving probe scripts share (docs/benchmarks/*-serving-probes/run_sNN.sh source this from the
# repository root): unpacking carried binaries, the fp8 rows through the CLI (ab_rows, over the caller's FP8_ROWS),
# the validation steps and the packages of variant trees, each printing one summary line (logs under $OUT).
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
# package NAME SOURCE: the Python package built from the tree at SOURCE, into .devbin/py/NAME
package() {
  rm -rf .devbin/py/$1
  CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 300 python3 -m pip install -q --no-build-isolation --no-deps \
    --target .devbin/py/$1 -C build-dir=/tmp/build-wheel/$1 -C cmake.define.FLASHGATE_CUDA_TARGETS=90a $2 \
    > $OUT/pip_$1.log 2>&1
  echo "pip $1 rc=$? at ${SECONDS}s"
}
main_package() { package main .; }  # this tree's
serving_bench() {  # the benchmark's serving rows with the package of main_package
  FLASHGATE_GIT_REV=$(cat .devbin/rev 2>/dev/null) PYTHONPATH=.devbin/py/main timeout 300 \
    python3 bench/run.py --out $OUT/bench --fla .peers --rows ctx > $OUT/bench.log 2>&1
  echo "bench rc=$? at ${SECONDS}s"
}
gpu_pytest() {
  PYTHONPATH=.devbin/py/main timeout 240 python3 -m pytest -q -ra tests/python > $OUT/pytest.log 2>&1
  echo "pytest rc=$? at ${SECONDS}s: $(tail -1 $OUT/pytest.log)"
}
# bench_variants "NAME[=ENV=VALUE] ..." [PKG]: the benchmark's serving rows with a package (default .devbin/py/main),
# once per variant
bench_variants() {
  local v
  for v in $1; do
    FLASHGATE_GIT_REV=$(cat .devbin/rev 2>/dev/null) PYTHONPATH=${2:-.devbin/py/main} timeout 200 \
      env ${v#*=} python3 bench/run.py --out $OUT/bench_${v%%=*} --rows ctx --only serving > $OUT/bench_${v%%=*}.log 2>&1
    echo "bench ${v%%=*} rc=$? at ${SECONDS}s"
  done
}
# variant_package NAME FILE SED: the package of this tree with one sed edit of FILE, into .devbin/py/NAME
variant_package() {
  rm -rf /tmp/tree_$1 .devbin/py/$1 && mkdir -p /tmp/tree_$1 \
    && tar -c --exclude=./.git --exclude=./.devbin --exclude=./.peers --exclude='./build*' . | tar -x -C /tmp/tree_$1 \
    && sed -i "$3" /tmp/tree_$1/$2 && ! cmp -s $2 /tmp/tree_$1/$2 || { echo "variant $1: sed changed nothing"; return 1; }
  package $1 /tmp/tree_$1
}
# tree_package NAME TARBALL: the package of a carried tree (git archive), into .devbin/py/NAME
tree_package() {
  rm -rf /tmp/tree_$1 && mkdir -p /tmp/tree_$1 && tar -xf $2 -C /tmp/tree_$1 && package $1 /tmp/tree_$1
}
# serving_validation BINDIR [FILTER]: the serving suite (its first failures printed) and memcheck over FILTER (default:
# the split tests; "-": none)
serving_validation() {
  serving_suite $1
  grep -E '^\[  FAILED|Failure' $OUT/gpu_tests.log | head -5
  local splits=PagedCuda.EverySplitCountAgrees:DecodeCuda.EverySplitCountAgrees:PagedCuda.HeuristicSplitsLongVerify
  local filter=${2:-$splits}
  [ "$filter" = - ] || memcheck $1 "$filter"
}
# package_and_record: this tree's package, pytest on the GPU and the benchmark of record (its fp8 table printed)
package_and_record() {
  main_package; gpu_pytest; serving_bench
  grep -A8 "x bf16 tokens/s" $OUT/bench/report.md
}
