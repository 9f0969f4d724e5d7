add_test([=[Smoke.Version]=]  /work/main/build/tests/flashgate_cpu_tests [==[--gtest_filter=Smoke.Version]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Smoke.Version]=]  PROPERTIES WORKING_DIRECTORY /work/main/build/tests SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==] LABELS cpu)
set(  flashgate_cpu_tests_TESTS Smoke.Version)
