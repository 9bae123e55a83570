#!/usr/bin/env bash
# Device call (machine warm, FA3 installed): paired A/B throughput, page 1 against page N, both
# servers of a pair on one GPU for the whole measurement, passes in ABBA order, ratio with a 95%
# interval over rounds (sglang_eagle_paged/bench/ab.py). One pair per GPU, the GPUs side by side.
#   AB_MODEL=large   the 8B-shaped dummy pair (run call_core.sh first), 128 tokens, ignore_eos
#   AB_MODEL=testbed the trained 16M pair (carry its weights as tracked files), 256 tokens
#   AB_SETTLE=N      uncounted passes of the measured workload per side before round 0 (default 1)
#   AB_FREEZE_GC=1   SGLang's /freeze_gc on both servers after warm-up (garbage collection out of the passes)
#   AB_SET=controls  the testbed's control pairs: on_p1:on_p1_r2 (A/A), nospec_p1:nospec_p64, on_p1_k1:on_p64_k1
#   MAX_NEW=1        the per-request probe: prefill, draft extend and finish, no verify round
# carry: .whl .devbundle/extra                  Results: $OUT/ab.tgz (ab.json, ab.md, ab.png, logs)
source scripts/device/prelude.sh
# AB_LANES=1 measures one pair at a time (run 9: two host-bound 16M pairs side by side, on one host's
# CPUs, spread their per-round ratios from 0.63 to 1.12); default: one pair per GPU, side by side.
GPUS=${AB_LANES:-$(nvidia-smi -L | wc -l)}
lscpu 2>/dev/null | grep -E '^(CPU\(s\)|Model name|Thread|Core|Socket|NUMA|CPU max MHz)'  # the host the noise comes from
if [ "${AB_MODEL:-large}" = large ]; then
  [ -d /tmp/models/target ] || { echo "no /tmp/models: run call_core.sh first"; exit 1; }
  MODEL=(--set large --target /tmp/models/target --draft /tmp/models/draft --load-format dummy --ignore-eos
         --max-new ${MAX_NEW:-128} --max-total-tokens ${AB_KV:-49152})
else
  [ -f /tmp/testbed/target/model.safetensors ] || { echo "no testbed weights in this call"; exit 1; }
  MODEL=(--set ${AB_SET:-extended} --target /tmp/testbed/target --draft /tmp/testbed/draft --max-new ${MAX_NEW:-256})
fi
timeout -s INT ${AB_S:-500} python3 -m sglang_eagle_paged.bench.ab "${MODEL[@]}" \
  --pairs ${AB_PAIRS:-on_p1:on_p64,on_p1:on_p128} --rounds ${ROUNDS:-3} --questions ${QUESTIONS:-48} \
  --parallel 16 --parallel1-questions ${P1_QUESTIONS:-0} --warmup 8 --gpus $GPUS --mem-fraction 0.4 \
  --settle-passes ${AB_SETTLE:-1} ${AB_FREEZE_GC:+--freeze-gc} --out /tmp/ab > $OUT/ab.log 2>&1
echo "ab rc=$?"; tail -12 $OUT/ab.log
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
(cd /tmp/ab && tar czf $OUT/ab.tgz --exclude=triton_cache .)
