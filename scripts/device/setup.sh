#!/usr/bin/env bash
# On the GPU machine, from the checkout root: install the offline SGLang bundle (core
# and/or FA3, whichever parts were carried), the extra wheels and this package.
# Usage: bash scripts/device/setup.sh LOGFILE
set -uo pipefail
LOG=${1:-/dev/stdout}
T0=$(date +%s)
# Any bundle part this call carried (each call carries core or FA3, not both), or a fresh machine.
if [ -f .devbundle/core.tar ] || compgen -G ".devbundle/fa3.part*" >/dev/null || [ ! -f /tmp/site/.devbundle/env.sh ]; then
  bash .devbundle/install.sh .devbundle >> "$LOG" 2>&1 || { echo "install.sh failed"; tail -40 "$LOG"; exit 1; }
fi  # else: a later call on a warm machine, the bundle is installed already
source /tmp/site/.devbundle/env.sh
WHEELS=$(ls .devbundle/extra/*.whl .whl/*.whl 2>/dev/null)  # whichever this call carried
# pip --target over the bundle's site takes ~40 s even for two small wheels: skip wheels installed
# by an earlier call on this (warm) machine.
STAMP=/tmp/site/.devbundle/wheels.sha256
if [ -n "$WHEELS" ] && ! sha256sum $WHEELS 2>/dev/null | cmp -s - "$STAMP"; then
  python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site $WHEELS >> "$LOG" 2>&1 \
    || { echo "pip install of extra wheels failed"; tail -20 "$LOG"; exit 1; }
  sha256sum $WHEELS > "$STAMP"
fi
if [ -f .devbundle/flashinfer-jit-cache.tar.xz ] && [ ! -d ~/.cache/flashinfer ]; then
  mkdir -p ~/.cache && xz -dc .devbundle/flashinfer-jit-cache.tar.xz | tar xf - -C ~/.cache
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$LOG" 2>&1
echo "setup done in $(( $(date +%s) - T0 ))s" | tee -a "$LOG"
