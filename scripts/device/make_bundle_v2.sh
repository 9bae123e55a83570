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
# the machine has 0.23.2; the rest as the 0.5.12.post1 bundle carried them (served on the H200). The
# HTTP server's packages, shared with make_bundle_v3.sh, are the rows of bundle_server_pkgs.txt.
PKGS=$(cat <<'EOF'
sglang 0.5.17 always
sglang-kernel 0.4.5 always
flashinfer-python 0.6.15.post1 always
apache-tvm-ffi 0.1.11 always
cuda-tile 1.7.0 always
transformers 5.12.1 always
tokenizers 0.22.2 always
xgrammar 0.2.1 always
openai 2.6.1 always
compressed-tensors 0.20.1 always
EOF
)$'\n'$(cat "$(dirname "${BASH_SOURCE[0]}")/bundle_server_pkgs.txt")

BUNDLE_PKGS=$PKGS BUNDLE_RELEASE=0.5.17 DEVBUNDLE_CACHE=${DEVBUNDLE_CACHE:-$HOME/.cache/devbundle-v2} \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/make_bundle.sh" "$@"
