#!/usr/bin/env bash
# The whole CPU suite, as CI runs it (.ci/run): each SGLang generation in an environment of its own.
#   .venv     SGLang 0.5.23 (v2): the v2 adapter's tests, against the real wheels of each v2 module home
#   .venv-v1  SGLang 0.5.12.post1 (v1): everything else (the v1 adapter, the shared glue, kernels, tools, bench)
# Builds (or reuses) both environments first. Extra arguments go to both pytest runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

t0=$SECONDS
bash scripts/setup_cpu.sh
SGLANG_VERSION=0.5.12.post1 VENV=.venv-v1 bash scripts/setup_cpu.sh
bash scripts/fetch_sglang_wheels.sh
bash scripts/setup_realmodel.sh .venv-v1
echo "[test] environments ready in $((SECONDS - t0)) s"

V2_TESTS=(tests/adapters/v2 tests/test_settings.py tests/test_releases.py tests/test_hooks.py tests/test_layout.py
          tests/tools/test_doctor_v2.py)
existing=()
for t in "${V2_TESTS[@]}"; do [[ -e $t ]] && existing+=("$t"); done

status=0
t1=$SECONDS
.venv/bin/python -m pytest -q -p no:cacheprovider "${existing[@]}" "$@" || status=$?
echo "[test] v2 (SGLang 0.5.23) part took $((SECONDS - t1)) s"
t2=$SECONDS
.venv-v1/bin/python -m pytest -q -p no:cacheprovider tests --ignore=tests/adapters/v2 \
  --ignore=tests/tools/test_doctor_v2.py "$@" || status=$?
echo "[test] v1 (SGLang 0.5.12.post1) part took $((SECONDS - t2)) s"
exit $status
