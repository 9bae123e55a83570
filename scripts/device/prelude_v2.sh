# Sourced first by every device call that runs on the v2 bundle (SGLang 0.5.17, or 0.5.23 with
# SGLANG_BUNDLE=v3; call_v2.sh outside a dry run):
# install whatever this call carried (setup_v2.sh; a no-op once done), enter the bundle's
# environment, and stop servers an earlier call left running (they start their own session).
set -uo pipefail
export PYTHONUNBUFFERED=1
bash scripts/device/aside.sh restore   # the set-aside files this call carried (.devstage/aside/)
# SGLANG_BUNDLE=v3: the 0.5.23 bundle (setup_v3.sh, /tmp/site-v3) in place of 0.5.17's
if [ "${SGLANG_BUNDLE:-v2}" = v3 ]; then export DEVBUNDLE_SITE=${DEVBUNDLE_SITE:-/tmp/site-v3}; fi
bash "scripts/device/setup_${SGLANG_BUNDLE:-v2}.sh" "$OUT/log.txt" || { tail -30 "$OUT/log.txt"; exit 1; }
# units still waiting for pieces: this call carried some, the next ones bring the rest
[ -f "${DEVBUNDLE_SITE:-/tmp/site-v2}/.devbundle/env.sh" ] || { echo "bundle incomplete: nothing to run yet"; exit 0; }
source "${DEVBUNDLE_SITE:-/tmp/site-v2}/.devbundle/env.sh"
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
nvidia-smi -L
