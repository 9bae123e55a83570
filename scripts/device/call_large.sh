#!/usr/bin/env bash
# Device call 2 (machine warm from call 1): FA3 add-on, then the Llama-3-8B-shaped dummy
# pair (random weights: cost per step at a realistic size; acceptance means nothing there)
# through stock sglang.launch_server, ours vs SGLang's built-in at page 1/64/128, plus a
# torch profile of page 1 and page 64. Resumable: results accumulate in /tmp/large, so a second
# call with the same command measures the second group (three 8B servers take ~3 min to start).
# carry: .devbundle/fa3.part00 .devbundle/fa3.sha256 .devbundle/install.sh .devbundle/extra .whl
source scripts/device/prelude.sh
[ -d /tmp/models/target ] || { echo "no /tmp/models: run call_core.sh first"; exit 1; }
timeout -s INT ${LARGE_S:-460} python3 -m sglang_eagle_paged.bench.e2e --set large \
  --target /tmp/models/target --draft /tmp/models/draft --load-format dummy --out /tmp/large \
  --questions ${QUESTIONS:-48} --max-new 128 --ignore-eos --parallel 16 --parallel1-questions 4 \
  --warmup 8 --concurrency 3 --mem-fraction 0.88 --max-total-tokens 65536 --profile on_p1,on_p64,on_p64_fa3x \
  > $OUT/large.log 2>&1
echo "large rc=$?"; grep "^\[e2e\]" $OUT/large.log
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
(cd /tmp/large && tar czf $OUT/large.tgz --exclude=triton_cache --exclude='*.trace.json*' .)
