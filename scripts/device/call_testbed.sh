#!/usr/bin/env bash
# Device calls 3 and 4 (machine warm): the GPU suite on the trained testbed pair, extended set.
# Results accumulate in /tmp/e2e/e2e.json: a second call with the same command resumes
# where the first stopped (configurations measured already are not re-run).
# carry: .whl .devbundle/extra (the testbed weights travel as tracked files: sglang_eagle_paged/testbed)
source scripts/device/prelude.sh
export SGLANG_EAGLE_PAGED_TEST_GPU=1 E2E_OUT=/tmp/e2e E2E_TARGET=/tmp/testbed/target E2E_DRAFT=/tmp/testbed/draft
export E2E_SET=${E2E_SET:-extended} E2E_CONCURRENCY=${E2E_CONCURRENCY:-12} E2E_PROFILE=${E2E_PROFILE:-on_p1,on_p64,on_p64_fa3x}
export E2E_QUESTIONS=${E2E_QUESTIONS:-48} E2E_MAX_NEW=${E2E_MAX_NEW:-160} E2E_WARMUP=${E2E_WARMUP:-8}
mkdir -p $E2E_OUT
timeout -s INT ${SUITE_S:-480} python3 -m pytest -m gpu tests/gpu -q -rA -p no:cacheprovider > $OUT/pytest.log 2>&1
echo "suite rc=$?"; grep -E "^\[e2e\]|passed|failed|PASSED|FAILED|ERROR" $OUT/pytest.log | tail -60
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
(cd $E2E_OUT && tar czf $OUT/testbed_e2e.tgz --exclude=triton_cache --exclude='*.trace.json*' .)
