#!/usr/bin/env bash
# make_bundle.sh OUT_DIR [--no-fa3]      (here, on a machine with pip; not on the GPU machine)
#
# Builds an offline SGLang bundle for the GPU machine (Python 3.12, sm90, no network) from the package
# table a release's wrapper passes in BUNDLE_PKGS: make_bundle_v2.sh (SGLang 0.5.17 on the machine's
# own torch) and make_bundle_v3.sh (SGLang 0.5.23 with torch 2.14.1) hold the tables. Writes into OUT_DIR:
#   UNIT.partNN + UNIT.sha256   per unit of the table (its 4th column, default core): one tar (SHA256SUMS,
#                               manifest.txt, wheels.tar.xz; core also fa3.expected), split into pieces
#                               of at most PART_MIB (default 20) MiB: three fit a call without the
#                               testbed weights, one a call with them. A unit installs once all its
#                               pieces are on the machine, so the units that come first serve first.
#   fa3.partNN  + fa3.sha256    sgl_kernel/flash_ops.abi3.so (the FA3 backend; SGLang loads it from
#                               sgl_kernel, SGLANG_USE_SGL_FA3_KERNEL's default), xz -9e, same split
#   sizes.txt                   every piece's size and every wheel's, original and as bundled
# then prints the pieces' total and the device calls they take (bundle_size.py calls) before anything
# is carried. setup_v2.sh (setup_v3.sh) installs it there, from whichever pieces a call carried.
#
# Each wheel is re-written with stored (uncompressed) members so one xz stream over all of a unit's
# wheels compresses better than the wheels' own deflate. Slimmed on the way, because serving on sm90
# cannot need them (each drop is listed in manifest.txt):
#   sglang-kernel  flash_ops.abi3.so (-> fa3.part*), sm100/, infllm_ops (InfLLM-V2, loaded lazily),
#                  flashmla_ops (MLA; its import is guarded), lib/, include/
#   xgrammar       lib/ and include/ (a static library and headers; the bindings .so stays)
#   sglang         the Rust extensions srt/server/_core (SGLANG_RUST_SERVER, off by default),
#                  srt/grpc/_core (gRPC mode) and srt/multimodal/_core (one model's image processor)
#   torch          bin/protoc* (the protobuf compiler; nothing at run time calls it)
#   triton         ptxas-blackwell and cupti-blackwell/ (Triton takes them for sm >= 100 only), the
#                  static CUPTI/nvperf archives (for linking, never loaded) and a test library
# Downloads and compressions are cached in DEVBUNDLE_CACHE (the wrapper's default: ~/.cache/devbundle-vN).
# DRY_RUN=1 prints the package table and the pip command lines, downloads nothing.
# ESTIMATE=1 downloads (cached) and re-packs, then estimates each unit's xz size from a fast whole pass
#   (xz -1, scaled: bundle_size.py estimate) instead of compressing: the total and the calls in minutes.
# XZ_PRESET [-9] for the units (fa3 always -9e); CALL_MIB [61]: MiB of pieces one call carries (64 MiB
# less the tree with bench/results and the weights set aside, aside.sh).
set -euo pipefail

OUT=${1:?usage: make_bundle.sh OUT_DIR [--no-fa3]   (through make_bundle_v2.sh or make_bundle_v3.sh)}
WANT_FA3=1
[ "${2:-}" = "--no-fa3" ] && WANT_FA3=0
PKGS=${BUNDLE_PKGS:?BUNDLE_PKGS is unset: run make_bundle_v2.sh or make_bundle_v3.sh}
RELEASE=${BUNDLE_RELEASE:?BUNDLE_RELEASE is unset}
CACHE=${DEVBUNDLE_CACHE:?DEVBUNDLE_CACHE is unset}
PY=${PYTHON:-python3}
PART_MIB=${PART_MIB:-20}
PART=$((PART_MIB * 1024 * 1024))
XZ_PRESET=${XZ_PRESET:--9}
CALL_MIB=${CALL_MIB:-61}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# manylinux_2_18: NCCL's wheel; pip matches each tag exactly
PIP_PLAT=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp
          --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
          --platform manylinux_2_18_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

# the table's rows: name version policy [unit]
rows() { while read -r name ver policy unit; do [ -n "$name" ] && echo "$name $ver $policy ${unit:-core}"; done <<< "$PKGS"; }
UNITS=$(rows | awk '{print $4}' | awk '!seen[$0]++' | xargs)
[ "$(rows | awk '$1 == "sglang-kernel" {print $4}')" = core ] || { echo "ERROR: sglang-kernel must be in unit core" >&2; exit 2; }

if [ -n "${DRY_RUN:-}" ]; then
  echo "bundle: SGLang $RELEASE -> $OUT (units: $UNITS; pieces <= $PART_MIB MiB, fa3=$WANT_FA3, cache $CACHE)"
  rows | while read -r name ver policy unit; do
    echo "  $PY -m pip download ${PIP_PLAT[*]} -d $CACHE/wheels $name==$ver   [$policy] [$unit]"
  done
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
while read -r name ver policy unit; do
  if [ -z "$(find_wheel "$name" "$ver")" ]; then
    echo "   downloading $name==$ver"
    "$PY" -m pip download -q "${PIP_PLAT[@]}" -d "$CACHE/wheels" "$name==$ver" 2>&1 \
      | { grep -v "^WARNING: Location 'file:" || true; }
  fi
  [ -n "$(find_wheel "$name" "$ver")" ] || { echo "ERROR: no cp312 x86_64 wheel for $name==$ver" >&2; exit 1; }
done < <(rows)

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
SK_ORIG=""
WHEEL_LIST=()
for unit in $UNITS; do mkdir -p "$STAGE/$unit/wheels"; : > "$STAGE/$unit/manifest.txt"; done
while read -r name ver policy unit; do
  w=$(find_wheel "$name" "$ver")
  [ "$name" = "sglang-kernel" ] && SK_ORIG=$w
  WHEEL_LIST+=("$unit=$w")
  echo "$(basename "$w") $name $ver $policy" >> "$STAGE/$unit/manifest.txt"
done < <(rows)

echo "== re-packing wheels stored (slimming what serving on sm90 cannot need)"
FA3_HASH=$("$PY" - "$STAGE" "$SK_ORIG" "${WHEEL_LIST[@]}" <<'PYEOF'
import base64, csv, hashlib, io, os, re, sys, zipfile
stage, sk = sys.argv[1:3]
wheels = [a.split("=", 1) for a in sys.argv[3:]]
FA3 = "sgl_kernel/flash_ops.abi3.so"
# (wheel name prefix, member-path regex dropped)
SLIM = {
    "sglang_kernel-": re.compile(r"^(sgl_kernel/flash_ops\.abi3\.so|sgl_kernel/sm100/.*|sgl_kernel/infllm_ops[^/]*\.so"
                                 r"|sgl_kernel/flashmla_ops[^/]*\.so|lib/.*|lib64/.*|include/.*)$"),
    "xgrammar-": re.compile(r"^xgrammar/(lib|include)/.*$"),
    "sglang-": re.compile(r"^sglang/srt/(server|grpc|multimodal)/_core[^/]*\.so$"),
    "torch-": re.compile(r"^torch/bin/protoc[^/]*$"),
    "triton-": re.compile(r"^triton/(backends/nvidia/bin/ptxas-blackwell|backends/nvidia/lib/cupti-blackwell/.*"
                          r"|backends/nvidia/lib/cupti/[^/]*_static\.a|instrumentation/libGPUInstrumentationTestLib\.so)$"),
}
def h(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
def put(zout, name, data, attr):
    zi = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    zi.external_attr = attr
    zi.compress_type = zipfile.ZIP_STORED
    zout.writestr(zi, data)
fa3 = ""
for unit, src in wheels:
    base = os.path.basename(src)
    drop = next((rx for prefix, rx in SLIM.items() if base.startswith(prefix)), None)
    zin = zipfile.ZipFile(src)
    rec = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
    if sk and os.path.samefile(src, sk):
        for line in zin.read(rec).decode().splitlines():
            if line.startswith(FA3 + ","):
                b64 = line.split(",")[1].split("=", 1)[1]
                fa3 = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    deflated = 0  # the kept members as the wheel compressed them: the bundle's size without recompression
    with open(os.path.join(stage, unit, "slimmed.txt"), "a") as dropped, \
            zipfile.ZipFile(os.path.join(stage, unit, "wheels", base), "w", compression=zipfile.ZIP_STORED) as zout:
        rows = []
        for info in zin.infolist():
            n = info.filename
            if n.endswith("/") or n == rec:
                continue
            if drop is not None and drop.match(n):
                dropped.write(f"{base} {n} {info.file_size}\n")
                if n == FA3:
                    open(os.path.join(stage, "fa3.deflated"), "w").write(str(info.compress_size))
                continue
            deflated += info.compress_size
            data = zin.read(n)
            put(zout, n, data, info.external_attr)
            rows.append((n, h(data), len(data)))
        # The RECORD lists what the wheel holds now; csv quotes names with commas (SGLang ships
        # Triton configs named "E=64,N=1536,...json").
        rows.append((rec, "", ""))
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        put(zout, rec, text.getvalue().encode(), 0o100644 << 16)
    with open(os.path.join(stage, unit, "deflated"), "a") as f:
        f.write(f"{deflated}\n")
print(fa3)
PYEOF
)
[ -n "$FA3_HASH" ] || { echo "ERROR: flash_ops.abi3.so not found in $SK_ORIG" >&2; exit 1; }
echo "fa3 flash_ops.abi3.so sha256 $FA3_HASH" > "$STAGE/core/fa3.expected"

# the FA3 library as the bundle carries it, uncompressed (ESTIMATE samples it; the build compresses it)
fa3_so() {
  "$PY" - "$SK_ORIG" <<'PYEOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("sgl_kernel/flash_ops.abi3.so") as f:
    shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
PYEOF
}

if [ -n "${ESTIMATE:-}" ]; then
  # Each unit whole through xz -1 (fast), scaled by what -1 -> -9 (-9e for FA3) did to the 0.5.17 bundle's
  # units (scripts/device/README.md); the wheels' own deflate is the exact bound without recompression.
  echo "== estimate: each unit through xz -1, scaled to $XZ_PRESET (nothing written to $OUT)"
  {
    for unit in $UNITS; do
      echo "$unit $(du -sb "$STAGE/$unit/wheels" | cut -f1) $(awk '{s += $1} END {print s}' "$STAGE/$unit/deflated") $(
        tar -cf - -C "$STAGE/$unit" wheels | xz -T0 -1 -c | wc -c)"
    done
    if [ "$WANT_FA3" = 1 ]; then
      echo "fa3 $(fa3_so | wc -c) $(cat "$STAGE/fa3.deflated") $(fa3_so | xz -T0 -1 -c | wc -c)"
    fi
  } > "$STAGE/estimate.txt"
  "$PY" "$HERE/bundle_size.py" estimate "$PART_MIB" "$CALL_MIB" < "$STAGE/estimate.txt"
  exit 0
fi

for unit in $UNITS; do
  U=$STAGE/$unit
  awk '{print "slimmed", $0}' "$U/slimmed.txt" 2>/dev/null >> "$U/manifest.txt" || true
  extra=""; [ "$unit" = core ] && extra=fa3.expected
  (cd "$U" && sha256sum manifest.txt $extra wheels/*.whl > SHA256SUMS)
  # core at -9 keeps the name and key the 0.5.17 bundle's cache already has
  KEY=$(sha256sum < "$U/SHA256SUMS" | cut -c1-16)
  WXZ="$CACHE/core/wheels-$KEY.tar.xz"
  [ "$unit" = core ] && [ "$XZ_PRESET" = -9 ] || WXZ="$CACHE/core/$unit-wheels-$KEY${XZ_PRESET}.tar.xz"
  if [ ! -s "$WXZ" ]; then
    echo "== xz $XZ_PRESET over unit $unit's wheels (minutes; cached as $(basename "$WXZ"))"
    tar --sort=name --mtime='2026-01-01 00:00:00' --owner=0 --group=0 --numeric-owner \
        -cf - -C "$U" wheels | xz -T0 "$XZ_PRESET" -c > "$WXZ.tmp"
    mv "$WXZ.tmp" "$WXZ"
  fi
  cp "$WXZ" "$U/wheels.tar.xz"
  tar --sort=name --mtime='2026-01-01 00:00:00' --owner=0 --group=0 --numeric-owner \
      -cf "$STAGE/$unit.tar" -C "$U" SHA256SUMS manifest.txt $extra wheels.tar.xz
  rm -f "$OUT/$unit".part* "$OUT/$unit.sha256"
  split -b "$PART" -d -a 2 "$STAGE/$unit.tar" "$OUT/$unit.part"
  { echo "tar $(sha256sum < "$STAGE/$unit.tar" | cut -d' ' -f1)"
    (cd "$OUT" && sha256sum "$unit".part*) | awk '{print "part", $2, $1}'; } > "$OUT/$unit.sha256"
  rm -f "$STAGE/$unit.tar"
done

if [ "$WANT_FA3" = 1 ]; then
  XZ="$CACHE/fa3/flash_ops-$FA3_HASH.so.xz"
  if [ ! -s "$XZ" ]; then
    echo "== xz -9e of flash_ops.abi3.so (1.1 GB; slow: tens of minutes on 2 busy cores)"
    fa3_so | xz -T0 -9e -c > "$XZ.tmp"
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
  echo "# SGLang $RELEASE device bundle, built $(date -u +%Y-%m-%dT%H:%MZ) by scripts/device/make_bundle.sh"
  echo "# pieces (bytes, MiB)"
  (cd "$OUT" && for unit in $UNITS fa3; do for f in "$unit".part* "$unit".sha256; do
     if [ -e "$f" ]; then printf "%-14s %10d  %6.2f\n" "$f" "$(stat -c %s "$f")" "$(stat -c %s "$f" | awk '{print $1/1048576}')"; fi
   done; done)
  echo "# wheels: original MiB, bundled (stored, slimmed) MiB"
  for unit in $UNITS; do
    while read -r f name ver policy; do
      [ "$f" = slimmed ] && continue
      printf "%8.2f %8.2f  %s [%s] [%s]\n" "$(stat -c %s "$CACHE/wheels/$f" | awk '{print $1/1048576}')" \
        "$(stat -c %s "$STAGE/$unit/wheels/$f" | awk '{print $1/1048576}')" "$f" "$policy" "$unit"
    done < "$STAGE/$unit/manifest.txt"
  done
  echo "# dropped members (wheel, path, bytes)"
  cat "$STAGE"/*/slimmed.txt 2>/dev/null || true
} > "$OUT/sizes.txt"
echo "== bundle in $OUT"
sed -n '2,/^# wheels/p' "$OUT/sizes.txt" | grep -v '^# wheels'
(cd "$OUT" && "$PY" "$HERE/bundle_size.py" calls "$CALL_MIB" $(ls $(for u in $UNITS fa3; do echo "$u.part* $u.sha256"; done) 2>/dev/null)) \
  | tee -a "$OUT/sizes.txt"
