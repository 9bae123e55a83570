#!/usr/bin/env bash
# Download (pip download --no-deps) and unzip the published SGLang wheels of one release of each
# v2 module home into .sglang-wheels/<version>/ (ignored by git), so the tests can fingerprint
# and resolve each home's hook points on its real source:
#   0.5.13.post1  sglang/srt/speculative/eagle_info_v2.py
#   0.5.15.post1  sglang/srt/speculative/base_spec_worker.py
#   0.5.17        sglang/srt/speculative/eagle_worker_common.py
#   0.5.23        sglang/srt/speculative/eagle_worker_common.py
# Only the sglang/ package is unpacked. Idempotent: a release already unpacked is skipped.
# Env: PY (default .venv/bin/python, else python3) runs pip; SGLANG_WHEELS picks the folder.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${SGLANG_WHEELS:-$REPO/.sglang-wheels}"
PY="${PY:-$REPO/.venv/bin/python}"
[[ -x "$PY" ]] || PY=python3
RELEASES=(${RELEASES:-0.5.13.post1 0.5.15.post1 0.5.17 0.5.23})

mkdir -p "$DEST"
for v in "${RELEASES[@]}"; do
  if [[ -f "$DEST/$v/.unpacked" ]]; then
    echo "[fetch_sglang_wheels] $v already in $DEST/$v"
    continue
  fi
  T0=$SECONDS
  tmp="$(mktemp -d)"
  "$PY" -m pip download --disable-pip-version-check -q --no-deps "sglang==$v" -d "$tmp" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  whl=("$tmp"/sglang-"$v"-*.whl)
  rm -rf "$DEST/$v" && mkdir -p "$DEST/$v"
  "$PY" - "${whl[0]}" "$DEST/$v" <<'PYEOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("sglang/")])
PYEOF
  rm -rf "$tmp"
  touch "$DEST/$v/.unpacked"
  echo "[fetch_sglang_wheels] $v unpacked into $DEST/$v ($((SECONDS - T0)) s)"
done
