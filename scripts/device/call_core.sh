#!/usr/bin/env bash
# Device call 1 (fresh machine, kind nvidia-h200-x2 or nvidia-h200): the core bundle, then
# what needs neither FA3 nor the testbed weights:
# - flashinfer's attention kernels for the testbed's shape (head_dim 64) and SGLang's own JIT
#   kernels, compiled by nvcc on first use (minutes), by two dummy-weight testbed servers, so
#   the testbed call finds them cached; the flashinfer cache comes back for later sessions;
# - the Llama-3-8B-shaped dummy models for call 2 (CPU, meanwhile);
# - then, on a quiet machine, the kernel micro-benchmarks (ours and SGLang's in one process)
#   and SGLang's own copy benchmark (../shared/device/examples/bench_copy.py).
# carry: .devbundle/core.tar .devbundle/install.sh .devbundle/extra .devbundle/examples
#        .devbundle/make_dummy_models.py .whl   (testbed weights moved out: see README.md)
source scripts/device/prelude.sh
R=$OUT/core; mkdir -p $R
GPUS=$(nvidia-smi -L | wc -l)
# SKIP_FI_WARM=1 when this call carries .devbundle/flashinfer-jit-cache.tar.xz with the testbed's
# kernels (run 3's): setup.sh unpacks it. SKIP_KERNELS=1 leaves out the kernel benchmarks;
# KERN_ARGS=--quick runs fewer copy shapes.
[ -n "${SKIP_FI_WARM:-}" ] || ( export CUDA_VISIBLE_DEVICES=$(( GPUS - 1 )) MAX_JOBS=${FI_JOBS:-28}
  timeout -s INT ${FI_S:-360} python3 -m bench.e2e --set extended --only fi_on_p1,fi_on_p64 \
    --load-format dummy --target sglang_eagle_paged/testbed/target --draft sglang_eagle_paged/testbed/draft \
    --questions 2 --warmup 0 --max-new 16 --concurrency 2 --out /tmp/fiwarm > $R/flashinfer_warm.log 2>&1
  echo "flashinfer warm-up rc=$?" >> $R/flashinfer_warm.log ) &
FI=$!
python3 .devbundle/make_dummy_models.py /tmp/models --shape llama3-8b >> $OUT/log.txt 2>&1
echo "dummy models rc=$?" | tee -a $OUT/log.txt
wait $FI
grep -E "^\[e2e\]|rc=" $R/flashinfer_warm.log 2>/dev/null
pkill -9 -f "sglang.launch_server|sglang::" 2>/dev/null
[ -n "${SKIP_FI_WARM:-}" ] || tar cf - -C ~/.cache flashinfer | xz -T0 > $OUT/flashinfer-jit-cache.tar.xz
export CUDA_VISIBLE_DEVICES=0
if [ -z "${SKIP_KERNELS:-}" ]; then
  timeout ${KERN_S:-200} python3 -m bench.kernels --out $R ${KERN_ARGS:-} > $R/bench_kernels.log 2>&1
  echo "bench_kernels rc=$?" | tee -a $OUT/log.txt
fi
if [ -z "${SKIP_UPSTREAM:-}" ]; then  # SGLang's own example, for ratios from one run (run 2 has it)
  timeout 120 python3 .devbundle/examples/bench_copy.py > $R/upstream_bench_copy.json 2> $R/upstream_bench_copy.log
  echo "upstream bench_copy rc=$?" | tee -a $OUT/log.txt
fi
(cd $OUT && tar czf core.tgz core && rm -rf core)
