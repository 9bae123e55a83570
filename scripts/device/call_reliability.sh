#!/usr/bin/env bash
# Device call(s): the GPU reliability suite (tests/gpu/test_reliability_gpu.py): KV pressure,
# soak with aborts and empty prompts, 8k contexts on the testbed, 32k on the 8B-shaped dummy
# pair, TP=2 vs TP=1, HiCache (prefixes loaded back from host memory).
# KIND: nvidia-h200-x2 (the TP test needs 2 GPUs and skips on one).
# The machine must be warm with SGLang core + FA3 installed (call_core.sh, then call_large.sh's
# FA3 install, on the same x2 machine), like call_testbed.sh.
# carry: .whl .devbundle/extra (the testbed weights travel as tracked files)
# On x2 (REL_GPUS defaults to the GPU count) every group's servers start together, spread over
# both GPUs, except the TP=2 server: it starts alone, first, once nvidia-smi shows the GPUs empty
# (SGLang refuses TP ranks on GPUs with unequal free memory: run 4, started beside the others, it
# failed with "The memory capacity is unbalanced"; run 5 started it last and the 480 s limit came
# first). Run 5 took 480 s without it (REL_SOAK_S=120): give TP=2 a call of its own
# (REL_GROUPS=tp: only the TP group's three servers start; the other groups' tests skip) or expect
# the same call twice; whatever the time limit cuts is recorded "not measured" and the
# same call again runs only what is missing. On one GPU, REL_K picks groups (pytest -k), one call each fits in
# 10 minutes, e.g.
#   REL_K="pressure or long8k"   4 servers together, ~5 min
#   REL_K="soak"                 1 server, REL_SOAK_S (150) + 35 s idle + start, ~5 min
#   REL_K="tp"                   2 servers together, then the TP=2 one alone (needs 2 GPUs), ~5 min
#   REL_K="long32k"              2 dummy 8B servers, ~5 min (makes /tmp/models if missing)
#   REL_K="hicache"              1 server (HiCache, page 64), two passes of 48 prompts, ~4 min (run 12: 240 s with set-up)
# Results accumulate in /tmp/reliability/reliability.json: the same call again resumes.
source scripts/device/prelude.sh
export SGLANG_EAGLE_PAGED_TEST_GPU=1 REL_OUT=/tmp/reliability REL_TARGET=/tmp/testbed/target REL_DRAFT=/tmp/testbed/draft
export REL_LARGE_MODELS=${REL_LARGE_MODELS:-/tmp/models} REL_SOAK_S=${REL_SOAK_S:-150}
export REL_GPUS=${REL_GPUS:-$(nvidia-smi -L | wc -l)}
export REL_TRITON_SEED=${REL_TRITON_SEED:-/tmp/e2e/logs/triton_cache/*:/tmp/large/logs/triton_cache/*}
mkdir -p $REL_OUT
if [[ ( "${REL_K:-}" == *long32k* || "$REL_GPUS" -gt 1 ) && ! -f $REL_LARGE_MODELS/target/config.json ]]; then
  python3 scripts/device/make_dummy_large.py $REL_LARGE_MODELS >> $OUT/log.txt 2>&1
  echo "dummy models rc=$?"
fi
nvidia-smi -L
# A minute's margin before the call's 600 s limit: an interrupted suite stops its servers and packs.
timeout -s INT ${SUITE_S:-500} python3 -m pytest -m gpu tests/gpu/test_reliability_gpu.py -q -rA -s \
  -p no:cacheprovider ${REL_K:+-k "$REL_K"} > $OUT/pytest.log 2>&1
echo "suite rc=$?"; grep -E "^\[reliability\]|^(pressure|8k|32k|soak|tp|acceptance|long|nospec|hicache)|passed|failed|PASSED|FAILED|SKIPPED|ERROR" $OUT/pytest.log | tail -60
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
(cd $REL_OUT && tar czf $OUT/reliability.tgz --exclude=triton_cache --exclude=models32k .)
