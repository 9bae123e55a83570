#!/usr/bin/env bash
# Device call (machine warm, FA3 installed, testbed weights carried as tracked files): where page 64
# loses about 0.8 ms a round to page 1 on the trained 16M pair at one request at a time (run 9's
# paired A/B: 0.83x). Page 1 on GPU 0 and page 64 on GPU 1, each measured on 8 questions at
# parallel 1, then profiled at parallel 1 (PROFILE_STACK=1 keeps Python stacks: which functions,
# at inflated host times; without them: ops, launches and syncs at true times).
# Read it here with: python -m bench.profile compare E2E:on_p1 E2E:on_p64 --names p1 p64
# PROFILE_CONFIGS=on_p64,on_p128 profiles those two instead (run 13: page 64 about 4% slower than page 1
# at parallel 1, page 128 level: does page 64's verify free, sort and sync more often?).
# MAX_NEW=1 with QUESTIONS=40 profiles prefill steps only (the per-request probe's path).
# PROFILE_SET=controls PROFILE_CONFIGS=nospec_p1,nospec_p64: SGLang alone, without speculation.
# carry: .whl .devbundle/extra      Results: $OUT/profile_p1.tgz (e2e.json with the profile summaries)
source scripts/device/prelude.sh
[ -f /tmp/testbed/target/model.safetensors ] || { echo "no testbed weights in this call"; exit 1; }
GPUS=$(nvidia-smi -L | wc -l)
timeout -s INT ${PROFILE_S:-300} python3 -m bench.e2e --no-margins --set ${PROFILE_SET:-extended} \
  --only ${PROFILE_CONFIGS:-on_p1,on_p64} --target /tmp/testbed/target --draft /tmp/testbed/draft --out /tmp/profile_p1 \
  --questions ${QUESTIONS:-8} --max-new ${MAX_NEW:-256} --parallel 1 --warmup 8 --concurrency 2 --gpus $GPUS \
  --profile ${PROFILE_CONFIGS:-on_p1,on_p64} $( [ "${PROFILE_STACK:-0}" = 1 ] || echo --profile-no-stack ) \
  > $OUT/profile_p1.log 2>&1
echo "profile rc=$?"; grep "^\[e2e\]" $OUT/profile_p1.log
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
(cd /tmp/profile_p1 && tar czf $OUT/profile_p1.tgz --exclude=triton_cache --exclude='*.trace.json*' .)
