#!/usr/bin/env bash
# The whole CPU suite, as CI runs it (.ci/run): each SGLang generation in an environment of its own.
#   .venv     SGLang 0.5.23 (v2, triton 3.8.0, what `pip install sglang` brings): everything that is not
#             the v1 adapter (the v2 adapter, kernels, settings, releases, hooks, the plugin loader,
#             tools, bench, models)
#   .venv-v1  SGLang 0.5.12.post1 (v1, triton 3.6.0): the v1 adapter's tests (V1_TESTS)
# Builds (or reuses) both environments first, then runs the two parts side by side (one process
# each: the machine has two cores and the interpreted tests use one), each into its own log, which
# is printed whole when both are done, v2 first. Extra arguments go to both pytest runs.
# TEST_PARTS=v2 or TEST_PARTS=v1 runs one part alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The v1 adapter's tests, and those that drive the v1 worker's code (SGLang 0.5.12.post1's
# EAGLEWorker, its draft preprocess, allocator warm-up and verify) to check or measure ours against it:
# the tree-extension kernels are compared with 0.5.12.post1's allocator and spec_utils functions.
V1_TESTS=(tests/adapters/v1 tests/adapters/common tests/kernels/test_tree_alloc_reference.py
          tests/kernels/test_tree_extension.py tests/bench/test_reliability.py tests/bench/test_bench_kernels.py)

PARTS="${TEST_PARTS:-v2 v1}"
t0=$SECONDS
if [[ $PARTS == *v2* ]]; then
  bash scripts/setup_cpu.sh
  bash scripts/fetch_sglang_wheels.sh
  bash scripts/setup_realmodel.sh .venv
fi
if [[ $PARTS == *v1* ]]; then
  SGLANG_VERSION=0.5.12.post1 VENV=.venv-v1 bash scripts/setup_cpu.sh
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

pids=()
[[ $PARTS == *v2* ]] && { part v2 .venv/bin/python tests "${ignore[@]}" "$@" & pids+=($!); }
[[ $PARTS == *v1* ]] && { part v1 .venv-v1/bin/python "${V1_TESTS[@]}" "$@" & pids+=($!); }
wait "${pids[@]}"

status=0
for name in v2 v1; do
  [[ -f $logs/$name.rc ]] || continue
  echo "===== $name part ($( [[ $name == v2 ]] && echo "SGLang 0.5.23" || echo "SGLang 0.5.12.post1" )) ====="
  cat "$logs/$name.log"
  [[ $(cat "$logs/$name.rc") == 0 ]] || status=1
done
echo "[test] suite took $((SECONDS - t0)) s"
exit $status
