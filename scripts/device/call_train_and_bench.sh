#!/usr/bin/env bash
# Device call 1: core bundle, testbed training, kernel micro-benchmarks.
# carry: .devbundle/core.tar .devbundle/install.sh .devbundle/extra .whl
set -uo pipefail
export PYTHONUNBUFFERED=1
bash scripts/device/setup.sh $OUT/log.txt || exit 1
source /tmp/site/.devbundle/env.sh
python3 -c "import sglang_eagle_paged, sys; print('package at', sglang_eagle_paged.__file__)" | tee -a $OUT/log.txt
timeout 400 python3 scripts/device/make_testbed.py /tmp/testbed --target-seconds ${TARGET_S:-140} --draft-seconds ${DRAFT_S:-80} > $OUT/testbed.log 2>&1
echo "testbed rc=$?" | tee -a $OUT/log.txt; tail -15 $OUT/testbed.log
if [ -d /tmp/testbed/target ]; then tar cf - -C /tmp testbed | split -b 15M - $OUT/testbed.tar.part; fi
mkdir -p $OUT/kern
timeout 240 python3 -m bench.kernels --out $OUT/kern >> $OUT/log.txt 2>&1; echo "bench rc=$?" | tee -a $OUT/log.txt
tail -40 $OUT/log.txt
