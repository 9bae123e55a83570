#!/usr/bin/env bash
# setup_v3.sh [LOGFILE]        (on the GPU machine, from the checkout root; SGLANG_BUNDLE=v3 call_v2.sh runs it)
#
# Installs the SGLang 0.5.23 bundle of make_bundle_v3.sh into its own site, /tmp/site-v3 (pieces kept in
# /tmp/devbundle-v3, carried in .devbundle-v3/), never mixing with the 0.5.17 one in /tmp/site-v2:
# setup_v2.sh's steps with the units torch, nccl, triton and core, each installed once all its pieces
# are on the machine; until then each call says which units wait and checks nothing (the calls that
# carry the pieces go back to back). Once every unit is in, it says in one line what the bundle shadows
# of the machine's packages, then runs check_libs_v3.py (import, matmul, a Triton kernel, FA3 once its
# pieces are in, a CUDA graph, NCCL init; which CUDA library came from where) before setup_v2.sh's
# import check. The machine's cuDNN (9.19, torch 2.14.1 was built with 9.24) is taken with torch's
# own version check off: SGLang's LLM path calls no cuDNN (make_bundle_v3.sh says why each library
# travels or stays).
set -uo pipefail
export CARRY_DIR=.devbundle-v3 BUNDLE=${BUNDLE:-/tmp/devbundle-v3} DEVBUNDLE_SITE=${DEVBUNDLE_SITE:-/tmp/site-v3}
export BUNDLE_UNITS="torch nccl triton core" SETUP_WAIT_FOR_PARTS=1
# The CuTe DSL's package (cutlass) sits in nvidia_cutlass_dsl/dsl_packages, put on sys.path by a .pth file
# that a --target install on PYTHONPATH never runs: its folder goes on PYTHONPATH here.
export SETUP_ENV_EXTRA="export PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1 PYTHONPATH=$DEVBUNDLE_SITE/nvidia_cutlass_dsl/dsl_packages:\$PYTHONPATH"
export SETUP_PRECHECK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/check_libs_v3.py $DEVBUNDLE_SITE"
exec bash "$(dirname "${BASH_SOURCE[0]}")/setup_v2.sh" "$@"
