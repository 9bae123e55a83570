#!/usr/bin/env bash
# On the GPU machine, from the checkout root: install the offline SGLang bundle (core
# and/or FA3, whichever parts were carried), the extra wheels and this package.
# Usage: bash scripts/device/setup.sh LOGFILE
set -uo pipefail
LOG=${1:-/dev/stdout}
T0=$(date +%s)
SITE=${DEVBUNDLE_SITE:-/tmp/site}  # another site only for the CPU test of this script
# A warm machine keeps the ignored files of earlier calls, so the bundle parts carried by an earlier
# call are still here: installing them again on every call cost 41-52 s of device time each (run 12:
# 36 wheels, FA3's 1 GB library, the import check). Install on a fresh machine, or when a part is
# here that this machine has not installed yet (by name, size and time, so a part carried anew
# installs again).
PARTS=$(stat -c '%n %s %Y' .devbundle/core.tar .devbundle/fa3.part* 2>/dev/null)
PARTS_STAMP=$SITE/.devbundle/parts.stamp
if [ ! -f "$SITE/.devbundle/env.sh" ] || { [ -n "$PARTS" ] && [ "$PARTS" != "$(cat "$PARTS_STAMP" 2>/dev/null)" ]; }; then
  bash .devbundle/install.sh .devbundle "$SITE" >> "$LOG" 2>&1 || { echo "install.sh failed"; tail -40 "$LOG"; exit 1; }
  echo "$PARTS" > "$PARTS_STAMP"
else
  echo "bundle already installed on this machine: $(echo "$PARTS" | awk '{print $1}' | xargs)" >> "$LOG"
fi
source "$SITE/.devbundle/env.sh"
WHEELS=$(ls .devbundle/extra/*.whl .whl/*.whl 2>/dev/null)  # whichever this call carried
# pip --target over the bundle's site takes ~40 s even for two small wheels: skip wheels installed
# by an earlier call on this (warm) machine.
STAMP=$SITE/.devbundle/wheels.sha256
if [ -n "$WHEELS" ] && ! sha256sum $WHEELS 2>/dev/null | cmp -s - "$STAMP"; then
  python3 -m pip install -q --no-index --no-deps --upgrade --target "$SITE" $WHEELS >> "$LOG" 2>&1 \
    || { echo "pip install of extra wheels failed"; tail -20 "$LOG"; exit 1; }
  sha256sum $WHEELS > "$STAMP"
fi
if [ -f .devbundle/flashinfer-jit-cache.tar.xz ] && [ ! -d ~/.cache/flashinfer ]; then
  mkdir -p ~/.cache && xz -dc .devbundle/flashinfer-jit-cache.tar.xz | tar xf - -C ~/.cache
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$LOG" 2>&1
echo "setup done in $(( $(date +%s) - T0 ))s" | tee -a "$LOG"
