#!/usr/bin/env bash
# call_v2.sh SUBCOMMAND     one device call of issue 30 (SGLang 0.5.17's v2 worker on the H200)
#
# Every subcommand first runs setup_v2.sh (installs whatever bundle pieces this or an earlier call on
# this machine carried; a no-op once done), stops servers an earlier call left, and ends with one
# tarball under $OUT. Results accumulate in /tmp/v2/<subcommand> on the warm machine: the same
# call again resumes (configurations and pairs measured already are skipped).
#
#   setup     install (pieces carried in .devbundle-v2/ are kept in /tmp/devbundle-v2 across calls);
#             once FA3 is in: `doctor`, then one dummy-weight EAGLE server with the plugin answers one
#             request (bench.smoke), so a bundle that cannot serve fails here (DOCTOR=0 / SMOKE=0 skip)
#             (testbed weights moved out of the tree for these calls)
#   correct   points 1-3, fa3: outputs ours vs SGLang's own (page 64, 128, and 64 without overlap
#             scheduling), acceptance at 64/128 vs page 1, fake vs on; host syncs per draft step
#             (probes/sync_probe.py in every server); Triton compiles after warm-up (fresh
#             TRITON_CACHE_DIR per server). All servers of the set start together.
#   ab        paired ABBA A/B (bench.ab) of AB_PAIRS, one pair at a time, 95% intervals; MODEL=large
#             measures the Llama-3-8B-shaped dummy pair (random weights, scripts/device/make_dummy_large.py)
#   backends  point 5: triton and flashinfer at pages 16 and 64, on / fake, SGLang's own at 64
#             (flashinfer compiles its kernels with nvcc on first use: minutes on a fresh machine)
#   prepare   the duplication alone (bench.prepare_v2): SGLang's function against ours, GPU and host
#             time per call at batch 1-256, pages 16/64/128, 2 ms of GPU work queued ahead
#   profile   issue 36: V2_ONLY [on_p1,on_p64; off_p64 too if asked] under a steady load (PARALLEL 64,
#             MAX_RUNNING 128, GRAPH_BS 64), SGLang's torch profiler through /start_profile twice per server
#             (PROFILE_STEPS forward steps without Python stacks, then with; probes/round_marks.py marks
#             each round and verify, so the trace without stacks splits into rounds), each trace reduced on the
#             machine per verify round (bench.round_profile: GPU time by kernel group, host active vs
#             blocked, idle GPU gaps and what the scheduler was in); profile.md side by side. Raw traces
#             come back as $OUT/profile-traces.tar while under 15 MiB (else those without stacks, else none). With py-spy's wheel carried
#             once (.devbundle-v2/extra/py_spy-*.whl) each scheduler is also sampled from outside (PYSPY_S [5])
#
# Environment (defaults in brackets):
#   V2_S        seconds the measuring step may run [correct 420, ab 480, backends 420, profile 420]; at most 540
#   V2_ONLY     configurations of the set (comma-separated) [all of correct / backends]
#   V2_QUESTIONS, V2_MAX_NEW, V2_WARMUP, V2_PARALLEL   sweep workload [16, 160, 4, 16]; V2_PARALLEL=1
#               (correct): one request at a time, so greedy outputs compare bit for bit (at 16 the batch
#               each request shares changes run to run, and with it bf16 rounding: run 23)
#   AB_PAIRS    [bench/v2_sets.py AB_PAIRS, in that order; names of any set]; ROUNDS [6], QUESTIONS [32],
#               P1_QUESTIONS [8], AB_SETTLE [1], PARALLEL [16], ALSO_PARALLEL [none; e.g. 128],
#               AB_TAG [none: results in /tmp/v2/ab; else /tmp/v2/ab-TAG], MODEL [testbed | large | smollm2],
#               MAX_NEW [256], IGNORE_EOS [unset; 1: every reply MAX_NEW long]
#   AB_UNTIL    [unset] a pair stops before ROUNDS once its rounds, pooled with AB_PRIOR's, resolve +-this
#               percent (e.g. 3); AB_PRIOR: earlier ab.json or `ab_pool --json` files, space-separated, carried
#               (bench/results is set aside: carry them from .devstage/aside/bench/results/...)
#   AB_KV       KV slots per server of ab and profile [auto: per pair (profile: per call) the pool the larger
#               need takes to run PARALLEL (and ALSO_PARALLEL) requests without retraction (bench/kv_sizing.py,
#               SGLang's own reserve per decode: 2,048 slots per request at page 64, topk 8), printed; a number
#               sets it, e.g. 131072]. Retractions still counted go to ab.md (KV-bound) and report.md
#   GRAPH_BS    --cuda-graph-max-bs of every server [32]: at least the largest parallelism measured
#   MAX_RUNNING --max-running-requests of every server [SGLang's: 0.5.17 lowers it to 48 for speculative
#               decoding, so a parallelism above that queues]
#   FI_JOBS     nvcc jobs for flashinfer's JIT [12]
#   JIT_BACK=1  also return SGLang's and flashinfer's JIT caches ($OUT/jit-cache.tar.xz)
#   PROFILE_STEPS [24], LOAD_QUESTIONS [512: conversations of the load], PROFILE_EOS [unset: replies run
#               MAX_NEW long; 1: they may stop at EOS]   (profile; PARALLEL [64], MAX_NEW [256] as above)
#   DRY_RUN=1   no setup, no servers: print and check what would run (the CPU test)
# Results: $OUT/<subcommand>.tgz (e2e.json or ab.json, report.md, the probe's counts, server logs)
set -uo pipefail
export PYTHONUNBUFFERED=1
SUB=${1:-}
case "$SUB" in
  setup|correct|ab|backends|prepare|profile) ;;
  *) echo "usage: call_v2.sh setup|correct|ab|backends|prepare|profile   (see the header)" >&2; exit 2 ;;
esac
OUT=${OUT:?OUT is unset: run this through the device tool, or set OUT for a dry run}
case "$SUB" in correct|backends|profile) DEF_S=420 ;; ab) DEF_S=480 ;; prepare) DEF_S=240 ;; *) DEF_S=0 ;; esac
V2_S=${V2_S:-$DEF_S}
# The call's own limit is 600 s: leave a minute for setup, teardown and packing, or nothing comes back.
[[ "$V2_S" =~ ^[0-9]+$ ]] && [ "$V2_S" -le 540 ] || { echo "V2_S=$V2_S: want whole seconds, at most 540" >&2; exit 2; }
V2_ROOT=${V2_ROOT:-/tmp/v2}
R=$V2_ROOT/$SUB${AB_TAG:+-$AB_TAG}
PY=${PYTHON:-python3}
DRY=${DRY_RUN:+--dry-run}
T0=$(date +%s)

if [ -z "$DRY" ]; then
  source scripts/device/prelude_v2.sh
  # The testbed weights travel as tracked files only in the calls that carry them; a warm
  # machine keeps the copy an earlier call made.
  [ -f /tmp/testbed/target/model.safetensors ] || [ ! -f sglang_eagle_paged/testbed/target/model.safetensors ] \
    || { rm -rf /tmp/testbed && cp -r sglang_eagle_paged/testbed /tmp/testbed; }
  if [ "$SUB" = ab ] && [ "${MODEL:-testbed}" = large ] && [ ! -f /tmp/models/target/config.json ]; then
    "$PY" scripts/device/make_dummy_large.py /tmp/models > "$OUT/dummy_models.log" 2>&1 \
      || { tail -5 "$OUT/dummy_models.log"; exit 1; }
  fi
  if [ "${MODEL:-testbed}" = smollm2 ] && [ ! -f "${SMOLLM2_WORK:-/tmp/smollm2}/target/model.safetensors" ]; then
    echo "MODEL=smollm2: no converted target on this machine (call_smollm2.sh PART=A, then PART=B, TRAIN=0 will do)"; exit 1
  fi
  if [ "$SUB" != setup ] && [ "$SUB" != prepare ] && [ "${MODEL:-testbed}" = testbed ] && [ ! -f /tmp/testbed/target/model.safetensors ]; then
    echo "no testbed weights in this call or on this machine: carry them (tracked files) for '$SUB'"; exit 1
  fi
  if { [ "$SUB" = correct ] || [ "$SUB" = ab ] || [ "$SUB" = profile ]; } && [ ! -f "${DEVBUNDLE_SITE:-/tmp/site-v2}/sgl_kernel/flash_ops.abi3.so" ]; then
    echo "FA3 is not installed on this machine yet: carry the rest of .devbundle-v2/fa3.part* first"; exit 1
  fi
fi
mkdir -p "$R"
case "${MODEL:-testbed}" in
  testbed) MODEL=(--target /tmp/testbed/target --draft /tmp/testbed/draft --out "$R") ;;
  large)   MODEL=(--target /tmp/models/target --draft /tmp/models/draft --load-format dummy --out "$R") ;;
  # the real pair of issue 37: the target call_smollm2.sh PART=B converted on this warm machine, the head
  # it trained there, else the package's; chat template applied
  smollm2) source "$(dirname "${BASH_SOURCE[0]}")/smollm2_head.sh"; W=${SMOLLM2_WORK:-/tmp/smollm2}; HEAD=$(smollm2_head "$W")
           MODEL=(--target "$W/target" --draft "$HEAD" --tokenizer "$W/target" --out "$R") ;;
  *) echo "MODEL=$MODEL: want testbed, large or smollm2" >&2; exit 2 ;;
esac
GRAPH=(--cuda-graph-max-bs "${GRAPH_BS:-32}" ${MAX_RUNNING:+--max-running-requests "$MAX_RUNNING"})
[ "$SUB" = profile ] && GRAPH=(--cuda-graph-max-bs "${GRAPH_BS:-64}" --max-running-requests "${MAX_RUNNING:-128}")
RC=0
# measure FILTER ARGS...: the Python step under the time limit, its log kept, the lines that matter shown
measure() {
  local filter=$1; shift
  timeout -s INT "$V2_S" "$PY" -m bench.v2_run "$@" $DRY > "$R/run.log" 2>&1
  RC=$?
  grep -E "$filter|rror" "$R/run.log" | tail -40
  [ "$RC" = 0 ] || { echo "--- the end of $R/run.log (rc $RC)"; tail -8 "$R/run.log"; }
}

case "$SUB" in
  setup)
    if [ -z "$DRY" ]; then
      # doctor (the plugin's own report and self-test) once FA3 is in, unless DOCTOR=0
      if [ "${DOCTOR:-1}" = 1 ] && [ -f "${DEVBUNDLE_SITE:-/tmp/site-v2}/sgl_kernel/flash_ops.abi3.so" ]; then
        # on the CPU while the smoke server starts on the GPU: neither waits for the other
        { timeout 150 "$PY" -m sglang_eagle_paged.tools.cli doctor > "$R/doctor.txt" 2>&1
          echo "doctor rc=$?" >> "$R/doctor.txt"; } &
      fi
      if [ "${SMOKE:-1}" = 1 ] && [ -f "${DEVBUNDLE_SITE:-/tmp/site-v2}/sgl_kernel/flash_ops.abi3.so" ]; then
        timeout 420 "$PY" -m bench.smoke --load-format dummy --log-dir "$R/smoke" \
          --target sglang_eagle_paged/testbed/target --draft sglang_eagle_paged/testbed/draft > "$R/smoke.txt" 2>&1
        RC=$?; tail -30 "$R/smoke.txt"
      fi
      wait
      [ -f "$R/doctor.txt" ] && tail -25 "$R/doctor.txt"
      cp "$OUT/log.txt" "$R/setup.log"
    else
      echo "setup: setup_v2.sh, then sglang_eagle_paged.tools.cli doctor"
    fi ;;
  correct)
    measure "^\[(e2e|v2 sweep)\]|: mode=" sweep --set correct ${V2_ONLY:+--only "$V2_ONLY"} "${MODEL[@]}" "${GRAPH[@]}" \
      --questions "${V2_QUESTIONS:-16}" --max-new "${V2_MAX_NEW:-160}" --warmup "${V2_WARMUP:-4}" \
      --parallel "${V2_PARALLEL:-16}" --probe-dir "$PWD/scripts/device/probes" ;;
  ab)
    # Seeded with what earlier servers on this machine compiled (the correct set's, earlier A/B calls'):
    # SGLang's Triton kernels otherwise compile in the first CUDA-graph capture, a minute of start-up.
    measure "^\[v2 ab\]|^\| " ab ${AB_PAIRS:+--pairs "$AB_PAIRS"} "${MODEL[@]}" "${GRAPH[@]}" \
      --rounds "${ROUNDS:-6}" --questions "${QUESTIONS:-32}" --parallel1-questions "${P1_QUESTIONS:-8}" \
      --parallel "${PARALLEL:-16}" ${ALSO_PARALLEL:+--also-parallel "$ALSO_PARALLEL"} --max-new "${MAX_NEW:-256}" \
      --max-total-tokens "${AB_KV:-auto}" ${IGNORE_EOS:+--ignore-eos} \
      --settle-passes "${AB_SETTLE:-1}" --triton-seed "$V2_ROOT/correct/logs/triton_cache/*" \
      --triton-seed "$V2_ROOT/ab-*/*/logs/triton_cache/*" ${AB_UNTIL:+--until-pct "$AB_UNTIL"} \
      $(for p in ${AB_PRIOR:-}; do printf -- '--prior %s ' "$p"; done) ;;
  prepare)
    if [ -n "$DRY" ]; then echo "prepare: $PY -m bench.prepare_v2 --out $R"
    else timeout -s INT "$V2_S" "$PY" -m bench.prepare_v2 --out "$R" > "$R/run.log" 2>&1
         RC=$?; grep "^|" "$R/run.log"; [ "$RC" = 0 ] || tail -8 "$R/run.log"; fi ;;
  profile)
    # py-spy, where a call carried its wheel (.devbundle-v2/extra/py_spy-*.whl; setup_v2.sh installs it)
    PYSPY=${PYSPY:-$(ls "${DEVBUNDLE_SITE:-/tmp/site-v2}/bin/py-spy" 2>/dev/null)}
    measure "^\[v2 profile\]|: mode=" profile --only "${V2_ONLY:-on_p1,on_p64}" "${MODEL[@]}" "${GRAPH[@]}" \
      --steps "${PROFILE_STEPS:-24}" --load-questions "${LOAD_QUESTIONS:-512}" --parallel "${PARALLEL:-64}" \
      --max-new "${MAX_NEW:-256}" --max-total-tokens "${AB_KV:-auto}" ${PROFILE_EOS:+--eos} \
      ${PYSPY:+--py-spy "$PYSPY" --py-spy-s "${PYSPY_S:-5}"} \
      --probe-dir "$PWD/scripts/device/probes" ;;
  backends)
    export MAX_JOBS=${FI_JOBS:-12}
    measure "^\[e2e\]|: mode=" sweep --set backends ${V2_ONLY:+--only "$V2_ONLY"} "${MODEL[@]}" "${GRAPH[@]}" \
      --questions "${V2_QUESTIONS:-16}" --max-new "${V2_MAX_NEW:-160}" --warmup "${V2_WARMUP:-4}" ;;
esac
echo "$SUB rc=$RC after $(( $(date +%s) - T0 ))s"
[ -n "$DRY" ] && exit "$RC"
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
if [ "$SUB" = correct ] || [ "$SUB" = backends ]; then
  "$PY" -m bench.v2_report "$R" > /dev/null 2> "$R/report.err" && sed -n '/## Greedy/,$p' "$R/report.md" | head -60
fi
if [ "$SUB" = profile ]; then
  [ -f "$R/profile.md" ] && sed -n '/^## nostack/,/^## [a-z0-9_]*, /p' "$R/profile.md" | head -60
  # The traces are gzip already: a plain tar, kept only while small enough to come back (all of them,
  # else those without stacks, else none).
  for pick in traces 'traces/*/nostack'; do
    [ -d "$R/traces" ] || break
    (cd "$R" && tar cf "$OUT/profile-traces.tar" $pick 2>/dev/null)
    [ "$(stat -c %s "$OUT/profile-traces.tar" 2>/dev/null || echo 0)" -le $((15 * 1024 * 1024)) ] && break
    echo "raw traces ($pick) over 15 MiB: left on the machine ($R/traces)"; rm -f "$OUT/profile-traces.tar"
  done
fi
(cd "$V2_ROOT" && tar czf "$OUT/$(basename "$R").tgz" --exclude=triton_cache --exclude=traces "$(basename "$R")")
if [ -n "${JIT_BACK:-}" ]; then
  (cd ~/.cache && tar cf - $(ls -d tvm-ffi flashinfer sglang 2>/dev/null) | xz -T0 -6 > "$OUT/jit-cache.tar.xz")
fi
ls -l "$OUT"
exit "$RC"
