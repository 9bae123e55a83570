#!/usr/bin/env bash
# make_bundle_v2.sh OUT_DIR [--no-fa3]          (here, on a machine with pip; not on the GPU machine)
#
# The offline SGLang 0.5.17 bundle for the GPU machine (Python 3.12, torch 2.11.0+cu130, sm90, no
# network): 0.5.17 is the newest v2-worker release that pins the machine's torch, so torch and
# triton stay the machine's own. make_bundle.sh builds it from the table below (what it writes, how it
# slims, DRY_RUN=1, ESTIMATE=1: see its header): core.part00..02 (about 51 MiB) and fa3.part00..06
# (about 127 MiB). scripts/device/setup_v2.sh installs it there, from whichever pieces a call carried.
# Downloads and the slow FA3 compression are cached in ${DEVBUNDLE_CACHE:-~/.cache/devbundle-v2}.
set -euo pipefail

# name version policy
#   always : installed into the bundle's site, shadowing any copy the machine has
#   min:V  : installed only if the machine lacks it or has a version < V
# Everything else comes from the machine (KINDS.md's list: torch 2.11.0, triton 3.6.0, numpy,
# huggingface-hub 1.33.0, safetensors, sentencepiece, tiktoken, aiohttp, requests, uvloop, psutil,
# prometheus-client, pillow, scipy, einops, ninja, nvidia-ml-py, cuda-bindings, pyyaml, regex, ...).
# Versions: 0.5.17's own pins where it has them (sglang-kernel, flashinfer, tvm-ffi, transformers,
# openai, xgrammar, soundfile); tokenizers 0.22.2 because transformers 5.12.1 wants <= 0.23.0 and
# the machine has 0.23.2; the rest as the 0.5.12.post1 bundle carried them (served on the H200).
PKGS=$(cat <<'EOF'
sglang 0.5.17 always
sglang-kernel 0.4.5 always
flashinfer-python 0.6.15.post1 always
apache-tvm-ffi 0.1.11 always
cuda-tile 1.7.0 always
transformers 5.12.1 always
tokenizers 0.22.2 always
xgrammar 0.2.1 always
zstandard 0.25.0 always
fastapi 0.141.1 always
starlette 1.0.1 always
uvicorn 0.54.0 always
pydantic 2.14.4 always
pydantic-core 2.50.5 always
annotated-types 0.8.0 always
typing-inspection 0.4.5 always
typing-extensions 4.16.0 min:4.14.1
openai 2.6.1 always
sniffio 1.3.1 always
distro 1.9.0 always
orjson 3.13.0 always
pybase64 1.5.1 always
pyzmq 27.3.0 always
msgspec 0.23.0 always
setproctitle 1.3.8 always
python-multipart 0.0.34 always
partial-json-parser 0.2.1.1.post7 always
compressed-tensors 0.20.1 always
gguf 0.19.0 always
loguru 0.7.3 always
dill 0.4.1 always
ipython 9.18.1 always
traitlets 5.16.1 always
jsonschema 4.26.0 always
jsonschema-specifications 2025.9.1 always
referencing 0.37.0 always
rpds-py 2026.9.1 always
soundfile 0.13.1 always
cffi 2.1.1 always
nvidia-mtbench-evaluator 26.3 always
EOF
)

BUNDLE_PKGS=$PKGS BUNDLE_RELEASE=0.5.17 DEVBUNDLE_CACHE=${DEVBUNDLE_CACHE:-$HOME/.cache/devbundle-v2} \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/make_bundle.sh" "$@"
