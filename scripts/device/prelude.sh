# Sourced first by every scripts/device/call_*.sh: install what this call carried
# (setup.sh), enter the bundle's environment, and stop servers an earlier call left
# running (they start their own session, so a call's end does not stop them).
set -uo pipefail
export PYTHONUNBUFFERED=1
bash scripts/device/setup.sh $OUT/log.txt || exit 1
source /tmp/site/.devbundle/env.sh
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
# The testbed weights are in the tree only in the calls that carry them as tracked files.
[ -d /tmp/testbed/target ] || [ ! -d sglang_eagle_paged/testbed/target ] || cp -r sglang_eagle_paged/testbed /tmp/testbed
