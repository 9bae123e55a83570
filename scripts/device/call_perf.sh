#!/usr/bin/env bash
# Device call (machine warm, FA3 installed, testbed weights carried as tracked files): the
# end-to-end throughput target of the performance issue on the trained testbed pair, with
# all 80 MT-bench questions at parallel 16 and 16 of them at parallel 1: no speculation, and
# pages 1, 16, 64 and 128 with the plugin on, all started together, each GPU measuring its own
# one at a time; a torch profile with Python stacks of pages 1, 16
# and 64 (page 16 was the slowest page size on every backend in runs 3 and 4, cause unknown).
# No SGLang built-in here: at 80 questions it would take minutes per server (the suite has it).
# carry: .whl .devbundle/extra      Resumable: results accumulate in /tmp/perf.
source scripts/device/prelude.sh
[ -f /tmp/testbed/target/model.safetensors ] || { echo "no testbed weights in this call"; exit 1; }
GPUS=$(nvidia-smi -L | wc -l)
timeout -s INT ${PERF_S:-500} python3 -m bench.e2e --no-margins --set extended \
  --only nospec_p1,on_p1,on_p16,on_p64,on_p128 --target /tmp/testbed/target --draft /tmp/testbed/draft \
  --out /tmp/perf --questions ${QUESTIONS:-80} --max-new ${MAX_NEW:-256} --parallel 16 \
  --parallel1-questions ${P1_QUESTIONS:-16} --warmup 16 --concurrency 8 --gpus $GPUS \
  --profile ${PERF_PROFILE:-on_p1,on_p16,on_p64} \
  --triton-seed "/tmp/e2e/logs/triton_cache/*" > $OUT/perf.log 2>&1
echo "perf rc=$?"; grep "^\[e2e\]" $OUT/perf.log
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
(cd /tmp/perf && tar czf $OUT/perf.tgz --exclude=triton_cache --exclude='*.trace.json*' .)
