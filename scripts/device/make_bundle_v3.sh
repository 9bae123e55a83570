#!/usr/bin/env bash
# make_bundle_v3.sh OUT_DIR [--no-fa3]          (here, on a machine with pip; not on the GPU machine)
#
# The offline SGLang 0.5.23 bundle for the GPU machine (Python 3.12, sm90, no network): the release
# `pip install sglang` gives, with the torch it pins (2.14.1, the cu13 build) and Triton 3.8, none of
# which the machine has (torch 2.11.0+cu130, triton 3.6.0). make_bundle.sh builds it from the table
# below (what it writes, how it slims, DRY_RUN=1, ESTIMATE=1: see its header) in five units, each
# installed by scripts/device/setup_v3.sh once all its pieces are on the machine: torch, nccl, triton,
# core (SGLang and the Python packages) and fa3. It prints the pieces' total and the calls they take.
# Downloads and compressions are cached in ${DEVBUNDLE_CACHE:-~/.cache/devbundle-v3}.
#
# CUDA libraries (torch 2.14.1's Requires-Dist against torch 2.11.0's, which put the machine's there;
# each symbol torch 2.14.1's libraries import checked against the machine's versions' exports, lib_symbols.py):
#   NCCL 2.28.9 -> 2.30.7          travels: libtorch_cuda.so imports 11 symbols 2.28.9 lacks
#                                  (ncclCommGrow, ncclCommSuspend, ncclSignal, ...): torch would not load
#   cuDNN 9.19.0.56 (9.24.0.43)    stays: every symbol torch imports is there; torch's own version check
#                                  (runtime minor >= compiled minor) is skipped by
#                                  PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1 (setup_v3.sh), and SGLang's
#                                  LLM path calls no cuDNN (only its diffusion runtime does)
#   cuBLAS 13.1.0.3 (13.1.1.3)     stays: every symbol there (cuda-toolkit 13.0.2 -> 13.0.3 changes only
#                                  cuBLAS); the GPU check's matmul proves it
#   cuSPARSELt 0.8.0 (0.8.1)       stays: every symbol there; LLM serving calls no sparse kernel
#   NVSHMEM 3.4.5, the rest of cuda-toolkit 13.0.x: the same versions
# setup_v3.sh's GPU check proves or refutes the rest (import, matmul, a Triton kernel, FA3, a CUDA graph,
# NCCL init) and prints which library each loaded, from where.
set -euo pipefail

# name version policy [unit]   (policy as in make_bundle_v2.sh: always | min:V)
# Versions: 0.5.23's own pins where it has them (torch, sglang-kernel, flashinfer, tvm-ffi, transformers,
# openai, xgrammar, compressed-tensors, sentencepiece, soundfile); triton 3.8.0 (torch 2.14.1 asks
# ~=3.8.0, the only 3.8 release); torchvision 0.29.1 (built for torch 2.14: the machine's 0.26.0 is
# built for 2.11 and its operators would not load against 2.14); NCCL as torch 2.14.1 pins it.
# sgl-flash-mla (module flash_mla) and nvidia-cutlass-dsl[cu13] (module cutlass) are 0.5.23's own pins that a
# Llama EAGLE server imports while it starts (the draft worker's graph check imports FlashMLABackend; every
# Llama MLP builds a DualGemm, which imports the CuTe DSL): without either no server starts (run 32).
# tokenizers stays the machine's (0.23.2, 0.5.23's pin); the HTTP server's packages as the 0.5.17
# bundle carried them (served on the H200): the rows of bundle_server_pkgs.txt, shared with it.
PKGS=$(cat <<'EOF'
torch 2.14.1 always torch
torchvision 0.29.1 always torch
nvidia-nccl-cu13 2.30.7 always nccl
triton 3.8.0 always triton
sglang 0.5.23 always
sglang-kernel 0.4.10 always
flashinfer-python 0.7.2 always
apache-tvm-ffi 0.1.11 always
cuda-tile 1.7.0 always
transformers 5.19.0 always
xgrammar 0.2.7 always
openai 2.8.0 always
compressed-tensors 0.18.0 always
sentencepiece 0.2.1 always
sgl-flash-mla 1.0.0 always
nvidia-cutlass-dsl 4.8.0 always
nvidia-cutlass-dsl-libs-base 4.8.0 always
nvidia-cutlass-dsl-libs-core 4.8.0 always
nvidia-cutlass-dsl-libs-cu13 4.8.0 always
EOF
)$'\n'$(cat "$(dirname "${BASH_SOURCE[0]}")/bundle_server_pkgs.txt")

BUNDLE_PKGS=$PKGS BUNDLE_RELEASE=0.5.23 DEVBUNDLE_CACHE=${DEVBUNDLE_CACHE:-$HOME/.cache/devbundle-v3} \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/make_bundle.sh" "$@"
