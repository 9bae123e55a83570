#!/usr/bin/env bash
# Device call 2 (machine warm from call 1): FA3 add-on, then the Llama-3-8B-shaped dummy
# pair (random weights: cost per step at a realistic size; acceptance means nothing there)
# through stock sglang.launch_server: page 1, ours, ours with the FA3 metadata switches and
# SGLang's built-in at page 64/128, all started together, each GPU measuring its own servers
# one at a time, SGLang's built-in last; page 1 and page 64 run twice, once on each GPU (their
# spread is the noise); a torch profile (no Python stacks) of page 1 and page 64. Every server
# holds 49152 KV slots: at page 128, topk 8 each of 16 requests holds about 2.3k slots (prefix pages,
# one page per branch, the verify page); run 4's 32768 made page 128 retract ~500 times. Resumable: results
# accumulate in /tmp/large.
# carry: .devbundle/fa3.part00 .devbundle/fa3.sha256 .devbundle/install.sh .devbundle/extra .whl
source scripts/device/prelude.sh
[ -d /tmp/models/target ] || { echo "no /tmp/models: run call_core.sh first"; exit 1; }
# SKIP_LARGE=1: only install FA3 (setup.sh above), for a session whose minutes go to the suite.
# LARGE_ONLY=on_p1,on_p64 measures only those; LARGE_STACK=1 profiles with Python stacks (where the
# page-64 host time goes); e.g. LARGE_ONLY=on_p1,on_p64 LARGE_STACK=1 LARGE_S=300 QUESTIONS=16.
[ -z "${SKIP_LARGE:-}" ] || { echo "FA3 installed; 8B run skipped"; exit 0; }
GPUS=$(nvidia-smi -L | wc -l)
timeout -s INT ${LARGE_S:-480} python3 -m bench.e2e --no-margins --set large \
  --target /tmp/models/target --draft /tmp/models/draft --load-format dummy --out /tmp/large \
  --questions ${QUESTIONS:-32} --max-new 128 --ignore-eos --parallel 16 --parallel1-questions 4 \
  --warmup 8 --concurrency ${LARGE_CONCURRENCY:-16} --gpus $GPUS --mem-fraction 0.88 \
  --max-total-tokens ${LARGE_KV:-49152} --profile ${LARGE_PROFILE:-on_p1,on_p64} \
  $( [ "${LARGE_STACK:-0}" = 1 ] || echo --profile-no-stack ) ${LARGE_ONLY:+--only $LARGE_ONLY} \
  > $OUT/large.log 2>&1
echo "large rc=$?"; grep "^\[e2e\]" $OUT/large.log
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
(cd /tmp/large && tar czf $OUT/large.tgz --exclude=triton_cache --exclude='*.trace.json*' .)
