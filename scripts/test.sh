#!/usr/bin/env bash
# The whole CPU suite, as CI runs it (.ci/run): each SGLang generation in an environment of its own.
#   .venv     SGLang 0.5.23 (v2, triton 3.8.0, what `pip install sglang` brings): everything that is not
#             the v1 adapter (the v2 adapter, kernels, settings, releases, hooks, the plugin loader,
#             tools, bench, models)
#   .venv-v1  SGLang 0.5.12.post1 (v1, triton 3.6.0): the v1 adapter's tests (V1_TESTS)
#   .venv-517 SGLang 0.5.17 (the GPU machine's v2 release): the tests whose claims name it (V517_TESTS),
#             after the v2 part, in its process
# Builds (or reuses) both environments first, then runs the two parts side by side (one process
# each: the machine has two cores and the interpreted tests use one), each into its own log, which
# is printed whole when both are done, v2 first. Extra arguments go to both pytest runs.
# TEST_PARTS=v2, v1 or v517 runs one part alone (or any two, space-separated).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The v1 adapter's tests, and those that drive the v1 worker's code (SGLang 0.5.12.post1's
# EAGLEWorker, its draft preprocess, allocator warm-up and verify) to check or measure ours against it:
# the tree-extension kernels are compared with 0.5.12.post1's allocator and spec_utils functions.
V1_TESTS=(tests/adapters/v1 tests/adapters/common tests/kernels/test_tree_alloc_reference.py
          tests/kernels/test_tree_extension.py tests/bench/test_reliability.py tests/bench/test_bench_kernels.py)

# releases.PROVEN["fa3_fused_v2"] and ["fa3_in_place"] start at 0.5.17 on the strength of these files run
# on 0.5.17's own source (the releases between 0.5.17 and 0.5.23: scripts/check_fa3_proofs.sh, not here).
V517_TESTS=(tests/adapters/v2/test_fa3_replay.py tests/adapters/v2/test_fa3_in_place.py
            tests/adapters/v2/test_dense_draft.py tests/adapters/v2/test_dense_hooks.py
            tests/adapters/v2/test_dense_rounds.py tests/adapters/v2/test_fa3_dense.py
            tests/bench/test_device_v2_scripts.py::test_every_configuration_of_the_v2_sets_parses_with_the_installed_sglangs_own_parser)

PARTS="${TEST_PARTS:-v2 v1 v517}"
t0=$SECONDS
if [[ $PARTS == *v2* ]]; then
  bash scripts/setup_cpu.sh
  bash scripts/fetch_sglang_wheels.sh
  bash scripts/setup_realmodel.sh .venv
fi
if [[ $PARTS == *v1* ]]; then
  SGLANG_VERSION=0.5.12.post1 VENV=.venv-v1 bash scripts/setup_cpu.sh
fi
if [[ $PARTS == *v517* ]]; then
  SGLANG_VERSION=0.5.17 VENV=.venv-517 bash scripts/setup_cpu.sh
fi
echo "[test] environments ready in $((SECONDS - t0)) s"

ignore=()
for t in "${V1_TESTS[@]}"; do ignore+=("--ignore=$t"); done

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT

part() {  # name python pytest-args...
  local name=$1 py=$2 t=$SECONDS rc=0
  shift 2
  "$py" -m pytest -q -p no:cacheprovider "$@" > "$logs/$name.log" 2>&1 || rc=$?
  echo "[test] $name part took $((SECONDS - t)) s (exit $rc)" >> "$logs/$name.log"
  echo "$rc" > "$logs/$name.rc"
}

v2_then_517() {
  if [[ $PARTS == *v2* ]]; then part v2 .venv/bin/python tests "${ignore[@]}" "$@"; fi
  if [[ $PARTS == *v517* ]]; then part v517 .venv-517/bin/python "${V517_TESTS[@]}" "$@"; fi
}

pids=()
if [[ $PARTS == *v2* || $PARTS == *v517* ]]; then v2_then_517 "$@" & pids+=($!); fi
[[ $PARTS == *v1* ]] && { part v1 .venv-v1/bin/python "${V1_TESTS[@]}" "$@" & pids+=($!); }
wait "${pids[@]}"

status=0
declare -A RELEASE=([v2]=0.5.23 [v1]=0.5.12.post1 [v517]=0.5.17)
for name in v2 v1 v517; do
  [[ -f $logs/$name.rc ]] || continue
  echo "===== $name part (SGLang ${RELEASE[$name]}) ====="
  cat "$logs/$name.log"
  [[ $(cat "$logs/$name.rc") == 0 ]] || status=1
done
echo "[test] suite took $((SECONDS - t0)) s"
exit $status
