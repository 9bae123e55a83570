#!/usr/bin/env bash
# Make SGLang importable on a CPU-only machine, reproducibly.
#
# Creates a virtualenv (default .venv in the repo root) and installs into it:
#   * torch==2.13.0 (CPU wheel), triton (3.8.0 with SGLang 0.5.23, 3.6.0 with
#     0.5.12.post1; its interpreter runs Triton kernels on CPU tensors with
#     TRITON_INTERPRET=1), numpy<2.4
#   * sglang (default 0.5.23, the v2 worker; SGLANG_VERSION=0.5.12.post1 for
#     the v1 worker) with --no-deps (its full dependency set is CUDA-only)
#   * the small packages SGLang imports when the modules this project uses load
#   * test/bench tools: pytest, hypothesis, matplotlib, tqdm, requests
#   * this repo, editable, --no-deps
#   * the CPU-only shims in scripts/cpu_standins (torchvision, sgl_kernel),
#     put on the venv's path with a .pth file -- never part of the installed
#     sglang_eagle_paged package, never for serving
# and finally imports the SGLang modules with TRITON_INTERPRET=1 (scripts/cpu_import_check.py).
#
# Idempotent: a stamp in .venv records what was installed; a re-run with the
# same script only refreshes the shim path and re-runs the import check.
# Env: SGLANG_VERSION = 0.5.23 (default) | 0.5.12.post1 (the v1 environment,
#      e.g. SGLANG_VERSION=0.5.12.post1 VENV=.venv-v1) | 0.5.17 .. 0.5.22 (for the
#      fa3 proof files, scripts/check_fa3_proofs.sh);
#      VENV (default .venv, relative to the repo root or absolute);
#      PYTHON (default python3) picks the interpreter for the venv;
#      SETUP_CPU_FORCE=1 reinstalls the packages even if the stamp matches.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
VENV="${VENV:-.venv}"
[[ "$VENV" = /* ]] || VENV="$REPO/$VENV"
PY="$VENV/bin/python"
STANDINS="$REPO/scripts/cpu_standins"
STAMP="$VENV/.sglang_eagle_paged_cpu_setup"

# --- what gets installed (exact pins: the set tested here) -----------------
# torch: the CPU build 2.13.0 in both. `pip install sglang==0.5.23` brings torch 2.14.1, but the
# only 2.14.1 wheel for linux x86_64 on PyPI is the CUDA build (with several GB of NVIDIA libraries);
# its CPU build is not on PyPI. triton: what each generation's users have (0.5.23 brings 3.8.0;
# the v1 generation and the GPU machine's torch 2.11 use 3.6.0); its interpreter
# (TRITON_INTERPRET=1) runs the kernels on CPU tensors.
case "$SGLANG_VERSION" in
0.5.12.post1)
CORE=(
  "torch==2.13.0"          # CPU wheel (pip picks the local +cpu build here)
  "triton==3.6.0"
  "numpy<2.4"              # triton 3.6.0's interpreter needs numpy < 2.4
)
SGLANG="sglang==$SGLANG_VERSION"   # installed with --no-deps
# Found by trial (import, ModuleNotFoundError, add). Versions agree with
# sglang 0.5.12.post1's Requires-Dist (it pins transformers and openai).
NO_DEPS_EXTRA=()
SGLANG_DEPS=(
  "aiohttp==3.14.5"
  "compressed-tensors==0.20.1"
  "dill==0.4.1"
  "einops==0.8.2"
  "gguf==0.19.0"
  "ipython==9.18.1"
  "msgspec==0.23.0"
  "openai==2.6.1"
  "orjson==3.13.0"
  "packaging==26.4"
  "partial-json-parser==0.2.1.1.post7"
  "pillow==13.0.0"
  "psutil==7.2.2"
  "pybase64==1.5.1"
  "pydantic==2.14.4"
  "pyzmq==27.3.0"
  "sentencepiece==0.2.3"
  "setproctitle==1.3.8"
  "starlette==1.10.0"
  "transformers==5.6.0"
)
TOOLS=(
  "pytest==9.2.0"
  "hypothesis==6.170.17"
  "matplotlib==3.11.2"
  "tqdm==4.70.1"
  "requests==2.34.2"
)
# Transitive pins (a lock), so a fresh machine resolves the same set.
LOCK="aiohappyeyeballs==2.7.1 aiosignal==1.4.0 annotated-doc==0.0.7
annotated-types==0.8.0 anyio==4.16.0 asttokens==3.0.2 attrs==26.1.0
certifi==2026.10.19.post1 charset-normalizer==3.5.3 click==8.5.1
contourpy==1.3.3 cycler==0.12.1 distro==1.9.0 executing==2.3.0
filelock==4.3.1 fonttools==4.68.0 frozenlist==1.8.0 fsspec==2026.9.0
h11==0.16.0 hf-xet==1.8.0 httpcore==1.0.9 httpcore2==2.16.2 httpx==0.28.1
httpx2==2.16.2 huggingface_hub==1.33.0 idna==3.20 iniconfig==2.3.1
ipython_pygments_lexers==1.1.1 jedi==0.20.1 Jinja2==3.1.6 jiter==0.19.0
kiwisolver==1.5.1 loguru==0.7.3 markdown-it-py==4.3.0 MarkupSafe==3.0.4
matplotlib-inline==0.2.2 mdurl==0.1.2 mpmath==1.3.0 multidict==7.2.1
networkx==3.6.1 numpy==2.3.5 parso==0.8.7 pexpect==4.9.0 pluggy==1.7.0
prompt_toolkit==3.0.53 propcache==0.5.4 ptyprocess==0.7.0 pure_eval==0.2.4
pydantic_core==2.50.5 Pygments==2.21.0 pyparsing==3.3.3
python-dateutil==4.0.0 PyYAML==6.0.4 regex==2026.11.19 rich==15.0.0
safetensors==0.8.0 shellingham==1.5.4 sniffio==1.3.1 sortedcontainers==2.4.0
stack-data==0.6.3 sympy==1.14.0 tokenizers==0.22.2 traitlets==5.16.1
truststore==0.10.5 typer==0.29.2 typing-inspection==0.4.5
typing_extensions==4.16.0 tzdata==2026.6 urllib3==2.8.0 wcwidth==0.9.4
yarl==1.25.1"

MODULES=(
  sglang.srt.speculative.eagle_worker
  sglang.srt.mem_cache.memory_pool
  sglang.srt.mem_cache.allocator
  sglang.srt.mem_cache.common
  sglang.srt.server_args
  sglang.srt.plugins
  sglang.srt.plugins.hook_registry
  sglang.srt.speculative.spec_utils
  sglang.srt.speculative.eagle_info
  sglang.srt.managers.schedule_batch
)
;;
0.5.23|0.5.17|0.5.18|0.5.19|0.5.20|0.5.21|0.5.22)
CORE=(
  "torch==2.13.0"          # CPU wheel (pip picks the local +cpu build here)
  "triton==3.8.0"          # what `pip install sglang==0.5.23` brings
  "numpy<2.4"              # the lock's numpy, as in the v1 environment
)
SGLANG="sglang==$SGLANG_VERSION"   # installed with --no-deps
# Found by trial on 0.5.23 (import, ModuleNotFoundError, add). Versions agree with
# sglang 0.5.23's Requires-Dist where it pins (openai, compressed-tensors,
# sentencepiece, transformers, apache-tvm-ffi); compressed-tensors goes in
# --no-deps (its own dependencies would pull a CUDA torch).
SGLANG_DEPS=(
  "aiohttp==3.14.5"
  "apache-tvm-ffi==0.1.11"
  "dill==0.4.1"
  "einops==0.8.2"
  "fastapi==0.165.0"
  "gguf==0.19.0"
  "ipython==9.18.1"
  "loguru==0.7.3"
  "msgspec==0.23.0"
  "openai==2.8.0"
  "orjson==3.13.0"
  "packaging==26.4"
  "partial-json-parser==0.2.1.1.post7"
  "pillow==13.0.0"
  "psutil==7.2.2"
  "pybase64==1.5.1"
  "pydantic==2.14.4"
  "pyzmq==27.3.0"
  "sentencepiece==0.2.1"
  "setproctitle==1.3.8"
  "starlette==1.10.0"
  "transformers==5.19.0"
  "uvicorn==0.54.0"
)
NO_DEPS_EXTRA=("compressed-tensors==0.18.0")
TOOLS=(
  "pytest==9.2.0"
  "hypothesis==6.170.17"
  "matplotlib==3.11.2"
  "tqdm==4.70.1"
  "requests==2.34.2"
)
# Transitive pins (a lock), so a fresh machine resolves the same set.
LOCK="aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7
annotated-types==0.8.0 anyio==4.16.0 apache-tvm-ffi==0.1.11 asttokens==3.0.2
attrs==26.1.0 certifi==2026.10.19.post1 charset-normalizer==3.5.3 click==8.5.1
compressed-tensors==0.18.0 contourpy==1.3.3 cycler==0.12.1 dill==0.4.1
distro==1.9.0 einops==0.8.2 executing==2.3.0 fastapi==0.165.0 filelock==4.3.1
fonttools==4.68.0 frozenlist==1.8.0 fsspec==2026.9.0 gguf==0.19.0 h11==0.16.0
hf-xet==1.8.0 httpcore2==2.16.2 httpcore==1.0.9 httpx2==2.16.2 httpx==0.28.1
huggingface_hub==2.4.0 hypothesis==6.170.17 idna==3.20 iniconfig==2.3.1
ipython==9.18.1 ipython_pygments_lexers==1.1.1 jedi==0.20.1 Jinja2==3.1.6
jiter==0.19.0 kiwisolver==1.5.1 loguru==0.7.3 markdown-it-py==4.3.0
MarkupSafe==3.0.4 matplotlib-inline==0.2.2 matplotlib==3.11.2 mdurl==0.1.2
mpmath==1.3.0 msgspec==0.23.0 multidict==7.2.1 networkx==3.6.1 numpy==2.3.5
openai==2.8.0 opentelemetry-api==1.45.2 orjson==3.13.0 packaging==26.4
parso==0.8.7 partial-json-parser==0.2.1.1.post7 pexpect==4.9.0 pillow==13.0.0
pluggy==1.7.0 prompt_toolkit==3.0.53 propcache==0.5.4 psutil==7.2.2
ptyprocess==0.7.0 pure_eval==0.2.4 pybase64==1.5.1 pydantic==2.14.4
pydantic_core==2.50.5 Pygments==2.21.0 pyparsing==3.3.3 pytest==9.2.0
python-dateutil==4.0.0 PyYAML==6.0.4 pyzmq==27.3.0 regex==2026.11.19
requests==2.34.2 rich==15.0.0 safetensors==0.8.0 sentencepiece==0.2.1
setproctitle==1.3.8
shellingham==1.5.4 sniffio==1.3.1 sortedcontainers==2.4.0 stack-data==0.6.3
starlette==1.10.0 sympy==1.14.0 tokenizers==0.23.3 tqdm==4.70.1
traitlets==5.16.1 transformers==5.19.0 truststore==0.10.5 typer==0.29.2
typing-inspection==0.4.5 typing_extensions==4.16.0 tzdata==2026.6
urllib3==2.8.0 uvicorn==0.54.0 wcwidth==0.9.4 yarl==1.25.1"

MODULES=(
  sglang.srt.speculative.eagle_worker_common
  sglang.srt.speculative.eagle_worker_v2
  sglang.srt.speculative.standalone_worker_v2
  sglang.srt.speculative.multi_layer_eagle_worker_v2
  sglang.srt.mem_cache.memory_pool
  sglang.srt.mem_cache.allocator
  sglang.srt.plugins
  sglang.srt.plugins.hook_registry
)
;;
*)
  echo "[setup_cpu] SGLANG_VERSION=$SGLANG_VERSION: only 0.5.17 .. 0.5.23 and 0.5.12.post1 are pinned here" >&2
  exit 2
;;
esac
case "$SGLANG_VERSION" in
0.5.17|0.5.18|0.5.19|0.5.20|0.5.21)
  # The GPU machine's release (0.5.17) and those after it up to 0.5.21, for tests that must run on
  # their source (not in CI): 0.5.23's set with what they pin or import besides: transformers 5.12.1
  # (with its tokenizers and a huggingface_hub below 2) and xgrammar, which their scheduler imports
  # at load (0.2.1; 0.5.21 pins 0.2.7).
  LOCK="$(printf '%s\n' $LOCK | sed -e 's/^transformers==.*/transformers==5.12.1/' \
    -e 's/^tokenizers==.*/tokenizers==0.22.2/' -e 's/^huggingface_hub==.*/huggingface_hub==1.33.0/')"
  SGLANG_DEPS=("${SGLANG_DEPS[@]/transformers==5.19.0/transformers==5.12.1}")
  if [[ "$SGLANG_VERSION" == 0.5.21 ]]; then NO_DEPS_EXTRA+=("xgrammar==0.2.7")
  else NO_DEPS_EXTRA+=("xgrammar==0.2.1"); fi
;;
esac

say() { printf '[setup_cpu] %s\n' "$*"; }

# pip prints a warning per missing file:// index entry, and a resolver
# complaint that sglang's CUDA deps are absent (expected: --no-deps).
pipq() {
  "$PY" -m pip install --disable-pip-version-check -q "$@" 2>&1 \
    | { grep -vE "is ignored: it is neither a file nor a directory|^sglang ${SGLANG_VERSION//./\\.} requires |^compressed-tensors .* requires |dependency resolver does not currently|dependency conflicts\.$" || true; }
}

WANT="$(cat "${BASH_SOURCE[0]}")$SGLANG_VERSION"
WANT_HASH="$(printf '%s' "$WANT" | sha256sum | cut -d' ' -f1)"

if [[ ! -x "$PY" ]]; then
  say "creating virtualenv $VENV (${PYTHON:-python3} -m venv)"
  "${PYTHON:-python3}" -m venv "$VENV"
fi

if [[ "${SETUP_CPU_FORCE:-0}" != 1 && -f "$STAMP" && "$(cat "$STAMP")" == "$WANT_HASH" ]]; then
  say "packages already installed (stamp matches $STAMP); skipping pip"
else
  T0=$SECONDS
  CONS="$(mktemp)"
  trap 'rm -f "$CONS"' EXIT
  printf '%s\n' "${CORE[@]}" "$SGLANG" "${SGLANG_DEPS[@]}" "${TOOLS[@]}" $LOCK \
    | sed 's/[[:space:]]*#.*//' | grep -v '^$' > "$CONS"
  say "installing core: ${CORE[*]}"
  pipq -c "$CONS" "${CORE[@]}"
  say "installing $SGLANG --no-deps (its CUDA dependencies are not installed)"
  pipq --no-deps "$SGLANG"
  say "installing SGLang's import-time deps: ${SGLANG_DEPS[*]}"
  pipq -c "$CONS" "${SGLANG_DEPS[@]}"
  if (( ${#NO_DEPS_EXTRA[@]} )); then
    say "installing --no-deps: ${NO_DEPS_EXTRA[*]}"
    pipq --no-deps "${NO_DEPS_EXTRA[@]}"
  fi
  say "installing tools: ${TOOLS[*]}"
  pipq -c "$CONS" "${TOOLS[@]}"
  say "installing this repo editable (--no-deps)"
  pipq --no-deps -e "$REPO"
  printf '%s' "$WANT_HASH" > "$STAMP"
  say "pip steps took $((SECONDS - T0)) s"
fi

# CPU-only shims: a .pth file puts scripts/cpu_standins on sys.path *after*
# site-packages, so a real torchvision / sgl_kernel, if ever installed, wins.
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
PTH="$SITE/zz_sglang_eagle_paged_cpu_standins.pth"
printf '%s\n' "$STANDINS" > "$PTH"
say "CPU-only shims (tests + CPU demo only, NEVER for serving): torchvision, sgl_kernel"
say "  from $STANDINS via $PTH"

# The editable install must point at this checkout (matters for a moved repo).
# Asked from / so that the checkout on the current directory cannot stand in for the install.
if ! (cd / && "$PY" -c 'import sys, sglang_eagle_paged as m; sys.exit(0 if m.__file__.startswith(sys.argv[1]) else 1)' "$REPO/") 2>/dev/null; then
  say "re-pointing the editable install at $REPO"
  pipq --no-deps -e "$REPO"
fi

# SGLang's own log lines at import (one, on 0.5.23, about the GPU this machine lacks) come out as
# lines of ours naming where they come from (scripts/cpu_import_check.py).
TRITON_INTERPRET=1 "$PY" -W ignore "$REPO/scripts/cpu_import_check.py" "$SGLANG_VERSION" "${MODULES[@]}"
