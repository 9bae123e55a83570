# Sourced first by every scripts/device/call_*.sh: install what this call carried
# (setup.sh), enter the bundle's environment, and stop servers an earlier call left
# running (they start their own session, so a call's end does not stop them).
set -uo pipefail
export PYTHONUNBUFFERED=1
bash scripts/device/aside.sh restore   # the set-aside files this call carried (.devstage/aside/)
bash scripts/device/setup.sh $OUT/log.txt || exit 1
source /tmp/site/.devbundle/env.sh
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
# The testbed weights travel (as tracked files) only in the calls that carry them; the other
# calls have the configs and tokenizer alone, enough for --load-format dummy.
[ -f /tmp/testbed/target/model.safetensors ] || [ ! -f sglang_eagle_paged/testbed/target/model.safetensors ] \
  || { rm -rf /tmp/testbed && cp -r sglang_eagle_paged/testbed /tmp/testbed; }
nvidia-smi -L
