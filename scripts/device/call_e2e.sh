#!/usr/bin/env bash
# Device call 2 (machine still warm from call 1): FA3 add-on, then the GPU suite.
# carry: .devbundle/fa3.part00 .devbundle/fa3.sha256 .devbundle/install.sh .devbundle/extra .whl
set -uo pipefail
export PYTHONUNBUFFERED=1
bash scripts/device/setup.sh $OUT/log.txt || exit 1
source /tmp/site/.devbundle/env.sh
export SGLANG_EAGLE_PAGED_TEST_GPU=1 E2E_OUT=$OUT/e2e E2E_TARGET=${E2E_TARGET:-/tmp/testbed/target} E2E_DRAFT=${E2E_DRAFT:-/tmp/testbed/draft}
mkdir -p $E2E_OUT
timeout ${SUITE_S:-480} python3 -m pytest -m gpu tests/gpu -q -rA -p no:cacheprovider > $E2E_OUT/pytest.log 2>&1
echo "suite rc=$?"; tail -40 $E2E_OUT/pytest.log
# logs of failed servers only (files back are limited)
cd $E2E_OUT/logs 2>/dev/null && tar czf ../server_logs.tgz . && cd - >/dev/null && rm -rf $E2E_OUT/logs
