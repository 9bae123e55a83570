#!/usr/bin/env bash
# setup_v2.sh [LOGFILE]        (on the GPU machine, from the checkout root; every call_v2.sh runs it)
#
# Installs the SGLang 0.5.17 bundle of make_bundle_v2.sh from whichever pieces are in BUNDLE
# (default /tmp/devbundle-v2) into SITE (default /tmp/site-v2), once per machine and piece set.
# The pieces a call carries in the checkout's CARRY_DIR (.devbundle-v2/) are first copied to BUNDLE: a
# carried folder is replaced by every call, so the pieces of earlier calls live on the machine, not there.
#   units   BUNDLE_UNITS [core]: for each, all UNIT.partNN of UNIT.sha256 here -> verified, unpacked,
#           pip install --target SITE (bundle_select.py: which wheels, and what they shadow, said in
#           one line). A unit not complete: an error, or with SETUP_WAIT_FOR_PARTS=1 said and waited for
#           (nothing past the units runs until all are in)
#   fa3     all fa3.partNN of fa3.sha256 here   -> verified, SITE/sgl_kernel/flash_ops.abi3.so
#           (some parts only: said so; the fa3 backend waits for a later call that brings the rest)
#   plugin  this checkout, registered in SITE as the distribution sglang-eagle-paged (its
#           sglang.srt.plugins entry point, read from pyproject.toml) with the checkout on
#           PYTHONPATH: the servers run the tree that came with this call, nothing to build or carry.
#           A carried .whl/ (PKG_SOURCE=wheel) is installed instead.
#   extra   BUNDLE/extra/*.whl, if any (a wheel added after the core was built), once per machine
# then writes SITE/.devbundle/env.sh (PYTHONPATH, offline Hugging Face, CUDA_HOME and the JIT
# toolchain work-arounds; SETUP_ENV_EXTRA appended) and, after a new install, runs SETUP_PRECHECK (if
# set) and checks the imports SGLang serves with. setup_v3.sh runs this for the 0.5.23 bundle.
# SETUP_V2_IMPORT_CHECK=0 skips both checks (the CPU test of this script); PYTHON picks python.
set -uo pipefail
LOG=${1:-/dev/stdout}
B=${BUNDLE:-/tmp/devbundle-v2}
SITE=${DEVBUNDLE_SITE:-/tmp/site-v2}
CARRIED=${CARRY_DIR:-.devbundle-v2}
UNITS=${BUNDLE_UNITS:-core}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${PYTHON:-python3}
PKG_SOURCE=${PKG_SOURCE:-link}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_NO_INDEX=1
T0=$(date +%s)
mkdir -p "$SITE/.devbundle"
say() { echo "$*" | tee -a "$LOG"; }
die() { say "$(basename "$0" .sh): $*"; exit 1; }

# pieces_ready NAME: 0 when every part listed in NAME.sha256 is here with its hash; prints why not.
pieces_ready() {
  local name=$1 n=0 have=0 part want
  [ -f "$B/$name.sha256" ] || { echo "no $B/$name.sha256"; return 1; }
  while read -r kind part want; do
    [ "$kind" = part ] || continue
    n=$((n + 1))
    [ -f "$B/$part" ] || continue
    [ "$(sha256sum < "$B/$part" | cut -d' ' -f1)" = "$want" ] || { echo "$part: sha256 mismatch"; return 1; }
    have=$((have + 1))
  done < "$B/$name.sha256"
  [ "$n" -gt 0 ] || { echo "$name.sha256 lists no part"; return 1; }
  [ "$have" = "$n" ] || { echo "$have of $n $name parts here"; return 1; }
}
# joined NAME: the parts of NAME.sha256 in order, concatenated, on stdout
joined() { awk '$1 == "part" {print $2}' "$B/$1.sha256" | sed "s|^|$B/|" | xargs cat; }

mkdir -p "$B"
for f in "$CARRIED"/*.part* "$CARRIED"/*.sha256; do [ -f "$f" ] && cp -f "$f" "$B/"; done
if [ -d "$CARRIED/extra" ]; then mkdir -p "$B/extra" && cp -f "$CARRIED"/extra/*.whl "$B/extra/" 2>/dev/null; fi

NEW=0
WAITING=""
: > "$SITE/.devbundle/shadows.new"
# ---- the wheel units (core; setup_v3.sh: torch nccl triton core) -------------------------------
for unit in $UNITS; do
  if cmp -s "$B/$unit.sha256" "$SITE/.devbundle/$unit.sha256" 2>/dev/null && [ -f "$SITE/.devbundle/manifest-$unit.txt" ]; then
    say "$unit: installed on this machine already"
  elif why=$(pieces_ready "$unit"); then
    want=$(awk '$1 == "tar" {print $2}' "$B/$unit.sha256")
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
    joined "$unit" > "$TMP/$unit.tar"
    [ "$(sha256sum < "$TMP/$unit.tar" | cut -d' ' -f1)" = "$want" ] || die "$unit: the joined parts do not give $unit.tar's sha256"
    tar -xf "$TMP/$unit.tar" -C "$TMP" && rm "$TMP/$unit.tar"
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$TMP/wheels.tar.xz" "$TMP" \
      || die "$unit: wheels.tar.xz does not unpack"
    (cd "$TMP" && sha256sum -c --quiet SHA256SUMS) || die "$unit: a wheel's checksum does not match SHA256SUMS"
    # policy "always": install; "min:V": only where the machine lacks the package or has it older.
    SEL=$("$PY" "$HERE/bundle_select.py" "$TMP/manifest.txt" "$SITE/.devbundle/shadows.new") \
      || die "$unit: reading manifest.txt failed"
    say "$unit: pip install --target $SITE: $(echo "$SEL" | wc -w) wheels"
    (cd "$TMP/wheels" && "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" $SEL) \
      >> "$LOG" 2>&1 || die "$unit: pip install failed (see $LOG)"
    cp "$TMP/manifest.txt" "$SITE/.devbundle/manifest-$unit.txt"
    if [ "$unit" = core ]; then
      cp "$TMP/manifest.txt" "$TMP/fa3.expected" "$SITE/.devbundle/"
      rm -f "$SITE/.devbundle/fa3.sha256"  # a new core holds no FA3 library
    fi
    cp "$B/$unit.sha256" "$SITE/.devbundle/$unit.sha256"
    rm -rf "$TMP"; trap - EXIT
    NEW=1
  elif [ "${SETUP_WAIT_FOR_PARTS:-0}" = 1 ]; then
    WAITING="$WAITING $unit"
    say "$unit: waiting for the rest of its pieces ($why)"
  else
    die "$unit: not installed and not installable here ($why)"
  fi
done
cat "$SITE/.devbundle/shadows.new" >> "$SITE/.devbundle/shadows.txt" && rm -f "$SITE/.devbundle/shadows.new"
if [ -n "$WAITING" ]; then
  say "setup: waiting for unit(s)$WAITING: nothing checked until every unit is in (setup done in $(( $(date +%s) - T0 ))s)"
  exit 0
fi
[ "$NEW" = 1 ] && say "bundle $("$PY" "$HERE/bundle_select.py" --line "$SITE/.devbundle/shadows.txt")"

# ---- fa3 -------------------------------------------------------------------------------------
FA3_SO=$SITE/sgl_kernel/flash_ops.abi3.so
if [ -f "$FA3_SO" ] && cmp -s "$B/fa3.sha256" "$SITE/.devbundle/fa3.sha256" 2>/dev/null; then
  say "fa3: installed on this machine already"
elif why=$(pieces_ready fa3); then
  want_xz=$(awk '$1 == "xz" {print $2}' "$B/fa3.sha256")
  want_so=$(awk '$1 == "so" {print $2}' "$B/fa3.sha256")
  grep -q "$want_so" "$SITE/.devbundle/fa3.expected" || die "fa3: these parts are not the installed core's FA3 library"
  [ "$(joined fa3 | sha256sum | cut -d' ' -f1)" = "$want_xz" ] || die "fa3: the joined parts do not give the xz's sha256"
  mkdir -p "$(dirname "$FA3_SO")"
  joined fa3 | "$PY" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer, 1 << 20)' > "$FA3_SO.tmp"
  [ "$(sha256sum < "$FA3_SO.tmp" | cut -d' ' -f1)" = "$want_so" ] || { rm -f "$FA3_SO.tmp"; die "fa3: the library's sha256 does not match"; }
  chmod 755 "$FA3_SO.tmp" && mv "$FA3_SO.tmp" "$FA3_SO"
  cp "$B/fa3.sha256" "$SITE/.devbundle/fa3.sha256"
  say "fa3: restored $FA3_SO ($(stat -c %s "$FA3_SO") bytes)"
  NEW=1
else
  say "fa3: not installed ($why): --attention-backend fa3 waits for the rest"
fi

# ---- extra wheels: a module the import check found missing, added without rebuilding the core ----
EXTRA=$(ls "$B"/extra/*.whl 2>/dev/null)
if [ -n "$EXTRA" ] && ! sha256sum $EXTRA | cmp -s - "$SITE/.devbundle/extra.sha256"; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" $EXTRA >> "$LOG" 2>&1 \
    || die "pip install of $B/extra failed (see $LOG)"
  sha256sum $EXTRA > "$SITE/.devbundle/extra.sha256"
  say "extra: installed $(basename -a $EXTRA | xargs)"
  NEW=1
fi

# ---- deep_gemm: 0.5.17's draft worker imports dsa_backend while it captures CUDA graphs, and that
# module imports deep_gemm at module level on CUDA. DeepGEMM is a CUDA build the bundle does not
# carry and Llama-family serving never calls; a module that has nothing lets the import pass, and
# SGLANG_ENABLE_JIT_DEEPGEMM=0 (env.sh) keeps SGLang from taking its presence as DeepGEMM support.
if ! "$PY" -c "import deep_gemm" 2>/dev/null && [ ! -f "$SITE/deep_gemm/__init__.py" ]; then
  mkdir -p "$SITE/deep_gemm"
  cat > "$SITE/deep_gemm/__init__.py" <<'PYEOF'
"""Placeholder written by sglang-eagle-paged's scripts/device/setup_v2.sh: DeepGEMM is not installed."""


def __getattr__(name):
    raise AttributeError(f"deep_gemm.{name}: DeepGEMM is not installed on this machine (a placeholder module)")
PYEOF
  say "deep_gemm: placeholder module written (DeepGEMM not installed; SGLANG_ENABLE_JIT_DEEPGEMM=0)"
  NEW=1
fi

# ---- this package ----------------------------------------------------------------------------
DEV=$SITE/.devbundle/dev
rm -rf "$DEV"
if [ "$PKG_SOURCE" = wheel ]; then
  WHEELS=$(ls .whl/*.whl 2>/dev/null) || die "PKG_SOURCE=wheel but no .whl/*.whl carried"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" $WHEELS >> "$LOG" 2>&1 \
    || die "pip install of $WHEELS failed"
  say "plugin: installed $(basename -a $WHEELS | xargs)"
else
  rm -rf "$SITE"/sglang_eagle_paged "$SITE"/sglang_eagle_paged-*.dist-info  # one registration only
  "$PY" - "$DEV" pyproject.toml <<'PYEOF' || die "plugin: cannot register this checkout (pyproject.toml)"
import os, sys
try:
    import tomllib
except ImportError:  # Python < 3.11 (the CPU test on an older python)
    import tomli as tomllib
dev, pyproject = sys.argv[1:3]
project = tomllib.load(open(pyproject, "rb"))["project"]
dist = os.path.join(dev, f"{project['name'].replace('-', '_')}-{project['version']}.dist-info")
os.makedirs(dist)
open(os.path.join(dist, "METADATA"), "w").write(
    f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
with open(os.path.join(dist, "entry_points.txt"), "w") as f:
    for group, entries in project.get("entry-points", {}).items():
        f.write(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n")
    if project.get("scripts"):
        f.write("[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in project["scripts"].items()))
PYEOF
  say "plugin: this checkout ($PWD) registered as $(ls "$DEV")"
fi

# ---- env.sh ----------------------------------------------------------------------------------
ENVF=$SITE/.devbundle/env.sh
{
  echo "# written by scripts/device/setup_v2.sh; source it before serving"
  echo "export PYTHONPATH=$SITE$( [ "$PKG_SOURCE" = wheel ] || echo ":$DEV:$PWD" )\${PYTHONPATH:+:\$PYTHONPATH}"
  echo "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1"
  # FA3 from sgl_kernel, never the kernels hub (no network there); 0.5.17's default, said aloud
  echo "export SGLANG_USE_SGL_FA3_KERNEL=1"
  echo "export SGLANG_ENABLE_JIT_DEEPGEMM=0"
  [ -z "${SETUP_ENV_EXTRA:-}" ] || echo "$SETUP_ENV_EXTRA"
} > "$ENVF"
command -v ninja >/dev/null 2>&1 || {
  d=$("$PY" -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null) && echo "export PATH=$d:\$PATH" >> "$ENVF"; }
CUDA_HOME_GUESS=${CUDA_HOME:-${CUDA_PATH:-}}
NVCC=$(command -v nvcc || true)
if [ -z "$CUDA_HOME_GUESS" ] && [ -n "$NVCC" ]; then
  top=$("$NVCC" -dryrun -E -x cu /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
  if [ -n "$top" ] && [ -x "$top/bin/nvcc" ]; then CUDA_HOME_GUESS=$(cd "$top" && pwd -P)
  else CUDA_HOME_GUESS=$(dirname "$(dirname "$(readlink -f "$NVCC")")"); fi
fi
if [ -n "$CUDA_HOME_GUESS" ] && [ -x "$CUDA_HOME_GUESS/bin/nvcc" ]; then
  echo "export CUDA_HOME=$CUDA_HOME_GUESS" >> "$ENVF"
  if [ ! -f "$CUDA_HOME_GUESS/include/curand.h" ]; then  # flashinfer's sampling and JIT headers
    inc=$("$PY" -c 'import glob, os, nvidia; h = sorted(x for p in nvidia.__path__ for x in glob.glob(os.path.join(p, "*", "include", "curand.h"))); print(os.path.dirname(h[0]) if h else "")' 2>/dev/null)
    [ -n "$inc" ] && echo "export FLASHINFER_EXTRA_CUDAFLAGS=\"-isystem $inc\"" >> "$ENVF"
  fi
  # JIT modules link with -lcuda: an unversioned libcuda.so, else a link to the driver's .so.1
  if [ ! -e "$CUDA_HOME_GUESS/lib64/stubs/libcuda.so" ] && [ ! -e "$CUDA_HOME_GUESS/lib64/libcuda.so" ]; then
    so1=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null) | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')
    if [ -n "$so1" ]; then
      mkdir -p "$SITE/.devbundle/culink" && ln -sf "$so1" "$SITE/.devbundle/culink/libcuda.so"
      echo "export LIBRARY_PATH=$SITE/.devbundle/culink\${LIBRARY_PATH:+:\$LIBRARY_PATH}" >> "$ENVF"
    fi
  fi
else
  say "   WARNING: no nvcc: flashinfer attention and SGLang's JIT kernels cannot compile"
fi

# ---- import check, after a new install -------------------------------------------------------
# SETUP_PRECHECK: a script run first, in the bundle's environment (setup_v3.sh: the CUDA-library check)
if [ "$NEW" = 1 ] && [ "${SETUP_V2_IMPORT_CHECK:-1}" = 1 ] && [ -n "${SETUP_PRECHECK:-}" ]; then
  ( source "$ENVF"; "$PY" $SETUP_PRECHECK ) 2>&1 | tee -a "$LOG" | grep -E "^(ok|wait|FAIL|cuda libs|libs )" ; [ "${PIPESTATUS[0]}" = 0 ] \
    || die "$SETUP_PRECHECK failed (see $LOG)"
fi
if [ "$NEW" = 1 ] && [ "${SETUP_V2_IMPORT_CHECK:-1}" = 1 ]; then
  ( source "$ENVF"; "$PY" - "$SITE" ) >> "$LOG" 2>&1 <<'PYEOF' || die "import check failed (see $LOG)"
import importlib, os, sys, time
from importlib.metadata import entry_points
t, site = time.time(), sys.argv[1]
import torch
print(f"   torch {torch.__version__} cuda={torch.version.cuda} available={torch.cuda.is_available()}")
import sglang, sgl_kernel, flashinfer, transformers, tokenizers, xgrammar
for m in ("sglang.srt.speculative.eagle_worker_v2", "sglang.srt.speculative.eagle_worker_common",
          "sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
          "sglang.srt.model_executor.model_runner", "sglang.srt.models.llama", "sglang.srt.models.llama_eagle",
          "sglang.srt.layers.attention.triton_backend", "sglang.srt.layers.attention.flashinfer_backend",
          "sglang.srt.layers.attention.flashattention_backend"):
    importlib.import_module(m)
# What a server imports while it starts beyond those: the draft worker's CUDA-graph capture imports
# the sparse/MLA backends (a missing deep_gemm stopped every EAGLE server once). Each where the
# release has it.
import importlib.util
# 0.5.23 also imports FlashMLA (flash_mla) in that check, and the CuTe DSL (cutlass) in every Llama MLP.
for m in ("sglang.srt.layers.attention.dsa_backend", "sglang.srt.layers.attention.deepseek_v4_backend",
          "sglang.srt.layers.attention.flashmla_backend", "sglang.kernels.ops.gemm.cutedsl_dual_gemm"):
    if importlib.util.find_spec(m) is not None:
        importlib.import_module(m)
        print(f"   {m.rsplit('.', 1)[1]} imports")
for mod in (sglang, sgl_kernel, flashinfer, transformers, tokenizers, xgrammar):
    where = "(bundle)" if mod.__file__.startswith(site) else "(machine)"
    print(f"   {mod.__name__:13s} {getattr(mod, '__version__', '?'):14s} {where}")
if os.path.exists(os.path.join(os.path.dirname(sgl_kernel.__file__), "flash_ops.abi3.so")):
    from sgl_kernel.flash_attn import flash_attn_with_kvcache  # noqa: F401  (loads FA3)
    print("   FA3 loaded")
plugins = [e.value for e in entry_points(group="sglang.srt.plugins")]
print(f"   sglang.srt.plugins entry points: {plugins}")
assert any(v.startswith("sglang_eagle_paged") for v in plugins), "this package's plugin is not registered"
# The plugin's own start-up check, as a server makes it (this machine's Python, not the CPU tests'):
# a refusal here costs a setup call, not a measuring one.
from sglang_eagle_paged.adapters.v2.hook_points import check_hook_points
why = check_hook_points()
assert why is None, f"the plugin would refuse this SGLang: {why}"
print("   hook points OK")
print(f"   imports OK in {time.time() - t:.1f}s")
PYEOF
  say "import check passed: $(grep -E 'sglang |FA3 loaded|imports OK' "$LOG" | tail -3 | xargs)"
fi
say "setup_v2 done in $(( $(date +%s) - T0 ))s (site $SITE)"
