#!/usr/bin/env bash
# The fa3 proof files on the SGLang releases between the two that scripts/test.sh runs them on
# (0.5.17 in .venv-517, 0.5.23 in .venv), each release on its own source: releases.PROVEN["fa3_in_place"]
# and ["fa3_fused_v2"] name a range, and this is what checks its middle. A maintainer's script,
# not in CI: one environment per release (about 2.5 GB each).
#
# Usage: scripts/check_fa3_proofs.sh [--dry-run] [RELEASE ...]   (default: 0.5.18 .. 0.5.22)
#   --dry-run  print what would be built and run, build and run nothing
# Env: VENV_DIR (default /tmp): release X's environment is $VENV_DIR/venv-X, built by
#      scripts/setup_cpu.sh (reused where its stamp matches);
#      KEEP_VENVS=0 deletes each environment after its run (default 1: kept for the next run).
# Prints one line per release (PASS or FAIL and pytest's counts), each failing run's log tail before
# it, and exits 1 if any release failed (2 on a usage error). Extra pytest arguments: PYTEST_ARGS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PROOFS=(tests/adapters/v2/test_fa3_replay.py tests/adapters/v2/test_fa3_in_place.py)
DEFAULT=(0.5.18 0.5.19 0.5.20 0.5.21 0.5.22)
VENV_DIR="${VENV_DIR:-/tmp}"
KEEP_VENVS="${KEEP_VENVS:-1}"

dry=0
releases=()
for a in "$@"; do
  case "$a" in
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "[check_fa3_proofs] unknown option $a" >&2; exit 2 ;;
    *) releases+=("$a") ;;
  esac
done
(( ${#releases[@]} )) || releases=("${DEFAULT[@]}")
for v in "${releases[@]}"; do
  # setup_cpu.sh pins each release it can build; the proofs need a v2 release with prepare_for_draft
  if ! [[ $v =~ ^0\.5\.(1[7-9]|2[0-3])$ ]]; then
    echo "[check_fa3_proofs] $v: no CPU environment is pinned for it (0.5.17 .. 0.5.23)" >&2
    exit 2
  fi
done

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
summary=()
status=0
for v in "${releases[@]}"; do
  venv="$VENV_DIR/venv-$v"
  if (( dry )); then
    [[ -x $venv/bin/python ]] && how="reuse (setup_cpu.sh re-checks it)" || how="build"
    echo "$v: $how $venv: SGLANG_VERSION=$v VENV=$venv bash scripts/setup_cpu.sh"
    echo "$v: $venv/bin/python -m pytest -q -p no:cacheprovider ${PROOFS[*]} ${PYTEST_ARGS:-}"
    continue
  fi
  t=$SECONDS
  echo "[check_fa3_proofs] $v: environment $venv"
  if ! SGLANG_VERSION=$v VENV=$venv bash scripts/setup_cpu.sh > "$logs/$v.setup" 2>&1; then
    tail -20 "$logs/$v.setup"
    summary+=("$v FAIL (setup_cpu.sh failed)")
    status=1
    continue
  fi
  rc=0
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "${PROOFS[@]}" ${PYTEST_ARGS:-} > "$logs/$v.log" 2>&1 || rc=$?
  counts="$(grep -E '^[=]* *[0-9]+ (passed|failed|error|skipped)|^[=]* *no tests ran' "$logs/$v.log" | tail -1 | sed -E 's/=//g; s/, [0-9]+ warnings?//; s/^ *//; s/ *$//')"
  if (( rc == 0 )); then
    summary+=("$v PASS ($counts; $((SECONDS - t)) s)")
  else
    tail -40 "$logs/$v.log"
    summary+=("$v FAIL (pytest exit $rc: ${counts:-no summary}; $((SECONDS - t)) s)")
    status=1
  fi
  if [[ $KEEP_VENVS == 0 ]]; then rm -rf "$venv"; fi
done
(( dry )) && exit 0
echo "===== fa3 proof files (${PROOFS[*]}) per SGLang release ====="
printf '%s\n' "${summary[@]}"
exit $status
