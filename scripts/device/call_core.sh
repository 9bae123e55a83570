#!/usr/bin/env bash
# Device call 1 (fresh machine): the core bundle, then everything that needs neither FA3
# nor the testbed: kernel micro-benchmarks (ours and SGLang's in the same process), SGLang's
# own copy benchmark (../shared/device/examples/bench_copy.py) in the same call, a GPU soak
# of the draft step on real pools, and the Llama-3-8B-shaped dummy models for call 2.
# carry: .devbundle/core.tar .devbundle/install.sh .devbundle/extra .devbundle/examples
#        .devbundle/make_dummy_models.py .whl
source scripts/device/prelude.sh
python3 .devbundle/make_dummy_models.py /tmp/models --shape llama3-8b >> $OUT/log.txt 2>&1
echo "dummy models rc=$?" | tee -a $OUT/log.txt
R=$OUT/core; mkdir -p $R
timeout ${KERN_S:-200} python3 scripts/bench_kernels.py --out $R > $R/bench_kernels.log 2>&1
echo "bench_kernels rc=$?" | tee -a $OUT/log.txt
timeout 120 python3 .devbundle/examples/bench_copy.py > $R/upstream_bench_copy.json 2> $R/upstream_bench_copy.log
echo "upstream bench_copy rc=$?" | tee -a $OUT/log.txt
timeout $(( ${SOAK_S:-100} + 60 )) python3 scripts/soak_cpu.py --device cuda --debug-pool --steps 1000000 \
  --time-limit ${SOAK_S:-100} --page-sizes 16,64,128 --max-live 32 --num-tokens 65536 --max-prompt 600 \
  --max-new 200 > $R/soak_gpu.json 2> $R/soak_gpu.log
echo "gpu soak rc=$?" | tee -a $OUT/log.txt
tail -c 1500 $R/soak_gpu.json
(cd $OUT && tar czf core.tgz core && rm -rf core)
