# Sourced first by every device call that runs on the v2 bundle (SGLang 0.5.17; call_v2.sh outside a dry run):
# install whatever this call carried (setup_v2.sh; a no-op once done), enter the bundle's
# environment, and stop servers an earlier call left running (they start their own session).
set -uo pipefail
export PYTHONUNBUFFERED=1
bash scripts/device/aside.sh restore   # the set-aside files this call carried (.devstage/aside/)
bash scripts/device/setup_v2.sh "$OUT/log.txt" || { tail -30 "$OUT/log.txt"; exit 1; }
source "${DEVBUNDLE_SITE:-/tmp/site-v2}/.devbundle/env.sh"
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
nvidia-smi -L
