#!/usr/bin/env bash
# Device call 3 (machine warm): the GPU suite on the trained testbed pair, extended set
# (fa3, triton and flashinfer; page 1/16/64/128; topk 1/4/8; on/fake/built-in; graphs off;
# the STANDALONE oracle; the FA3 metadata switches), all servers started together, spread
# over the machine's GPUs, each GPU measuring its own one at a time.
# Results accumulate in /tmp/e2e/e2e.json: a second call with the same command resumes
# where the first stopped (configurations measured already are not re-run).
# carry: .whl .devbundle/extra (the testbed weights travel as tracked files: sglang_eagle_paged/testbed)
source scripts/device/prelude.sh
[ -f /tmp/testbed/target/model.safetensors ] || { echo "no testbed weights in this call"; exit 1; }
GPUS=$(nvidia-smi -L | wc -l)
export SGLANG_EAGLE_PAGED_TEST_GPU=1 E2E_OUT=/tmp/e2e E2E_TARGET=/tmp/testbed/target E2E_DRAFT=/tmp/testbed/draft
export E2E_SET=${E2E_SET:-extended} E2E_CONCURRENCY=${E2E_CONCURRENCY:-64} E2E_GPUS=${E2E_GPUS:-$GPUS}
export E2E_PROFILE=${E2E_PROFILE:-} E2E_PROFILE_STACK=${E2E_PROFILE_STACK:-0}
# What earlier calls' servers compiled (SGLang's Triton kernels; our counted ones are never seeded).
export E2E_TRITON_SEED=${E2E_TRITON_SEED:-/tmp/fiwarm/logs/triton_cache/*:/tmp/large/logs/triton_cache/*}
# Sized to finish in one call on x2 (run 3: 24 questions x 128 tokens measured 28 of 38 before the limit).
export E2E_QUESTIONS=${E2E_QUESTIONS:-16} E2E_MAX_NEW=${E2E_MAX_NEW:-160} E2E_WARMUP=${E2E_WARMUP:-4}
mkdir -p $E2E_OUT /tmp/serve_default
# The README's main job for GPU users, on the last GPU, while the suite's servers start (the suite
# measures nothing until all of them are up): the embedded default pair, plugin on, MT-bench.
( export CUDA_VISIBLE_DEVICES=$(( GPUS - 1 ))
  timeout 300 python3 -m sglang_eagle_paged.tools.cli serve-default --port 31000 --num-questions ${SD_QUESTIONS:-16} \
    --max-total-tokens 131072 --mem-fraction-static 0.5 --no-progress --out /tmp/serve_default \
    --log-file /tmp/serve_default/server.log > /tmp/serve_default/stdout.log 2>&1
  echo "serve-default rc=$?" >> /tmp/serve_default/stdout.log ) &
# A minute's margin before the call's 600 s limit: an interrupted suite stops its servers and packs.
timeout -s INT ${SUITE_S:-500} python3 -m pytest -m gpu tests/gpu/test_e2e_gpu.py -q -rA -p no:cacheprovider \
  > $OUT/pytest.log 2>&1
echo "suite rc=$?"; grep -E "^\[e2e\]|passed|failed|PASSED|FAILED|ERROR" $OUT/pytest.log | tail -80
tail -30 /tmp/serve_default/stdout.log
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
(cd /tmp && tar czf $OUT/serve_default.tgz serve_default)
(cd $E2E_OUT && tar czf $OUT/testbed_e2e.tgz --exclude=triton_cache --exclude='*.trace.json*' .)
