# Sourced by call_smollm2.sh and call_v2.sh: which EAGLE head serves SmolLM2 on this machine.
# smollm2_head WORK: the head PART=B trained into WORK/head on this warm machine, else the package's.
SMOLLM2_PKG_HEAD=sglang_eagle_paged/testbed/smollm2-draft
smollm2_head() {
  if [ -f "$1/head/draft/model.safetensors" ]; then echo "$1/head/draft"; else echo "$SMOLLM2_PKG_HEAD"; fi
}
