"""The configurations of the v2-worker GPU run (issue 30): SGLang 0.5.17 on the trained testbed pair.

Every configuration is the testbed's fa3 / topk 8 / steps 5 / 64 draft tokens (``RunConfig``'s
defaults) unless its name says otherwise. ``on`` is the plugin, ``off`` SGLang untouched (its own
duplication), ``fake`` the plugin without the copy. ``_nooverlap`` adds ``--disable-overlap-schedule``
(0.5.17 then runs its synchronous v2 path; overlap scheduling is its default).

Sets, most important first within each (a cut-short run keeps the head):
  correct   point 1-3: outputs, acceptance, host syncs (the probe), compiles after warm-up
  backends  point 5: triton and flashinfer at pages 16 and 64, on / fake, SGLang's own at 64
  fa3meta   ours with the fused FA3 draft metadata set explicitly (``_fx``; v2's default since run 29, so
            ``on_*`` of a plugin at or after cae8b25 runs it too) at pages 64 and 128
  inplace   ours with FA3 reading the prefix tail in place, no copy (``_ip``, opt-in; its draft metadata
            then comes from SGLang's builders) at pages 64 and 128
  dense     issue 54: page 1's draft layout and reserve at pages 64 and 128 (``_dense``, opt-in, triton and
            flashinfer only), with triton at page 1 beside them (SGLang's own triton at page 64 is the backends set's)
An A/B pair names two configurations of any set (``AB_PAIRS``: the default pairs).
"""

from sglang_eagle_paged.bench.configs import RunConfig

NO_OVERLAP = ["--disable-overlap-schedule"]
# The plugin's FA3 draft metadata in one launch (adapters/v2/fa3_replay.py), named explicitly so that a
# configuration means the same on a checkout from before it became v2's default.
FA3_FUSED = {"SGLANG_EAGLE_PAGED_FA3_EXPAND": "fused"}
# Opt-in (run 29: not faster than the fused copy): FA3's draft decode reads the prefix's partial last page
# in place and each branch's draft slots per token, so the copy is skipped (adapters/v2/fa3_in_place.py).
FA3_IN_PLACE = {"SGLANG_EAGLE_PAGED_FA3_IN_PLACE": "1"}
# Opt-in: every branch's draft slots laid out as page 1 lays them out, inside pages the request owns, with
# page 1's reserve; nothing to copy (adapters/v2/dense_draft.py).
DENSE_DRAFT = {"SGLANG_EAGLE_PAGED_DENSE_DRAFT": "1"}

# Point 4, in the order the budget should buy them: ours against SGLang's own at the same page,
# then the page-N / page-1 ratios, then the synchronous scheduler's pair.
AB_PAIRS = ("on_p64:off_p64", "on_p1:on_p64", "on_p128:off_p128", "on_p1:on_p128",
            "on_p64_nooverlap:off_p64_nooverlap")


def correct_set() -> list:
    return [
        RunConfig("on_p64", page_size=64),
        RunConfig("off_p64", mode="off", page_size=64),
        RunConfig("on_p1", page_size=1),
        RunConfig("fake_p64", mode="fake", page_size=64),
        RunConfig("on_p128", page_size=128),
        RunConfig("off_p128", mode="off", page_size=128),
        RunConfig("on_p64_nooverlap", page_size=64, extra=list(NO_OVERLAP)),
        RunConfig("off_p64_nooverlap", mode="off", page_size=64, extra=list(NO_OVERLAP)),
        RunConfig("fake_p128", mode="fake", page_size=128),
        RunConfig("off_p1", mode="off", page_size=1),
    ]


def backends_set() -> list:
    out = []
    for short, backend in (("triton", "triton"), ("fi", "flashinfer")):
        for page in (64, 16):
            out += [RunConfig(f"{short}_on_p{page}", page_size=page, backend=backend),
                    RunConfig(f"{short}_fake_p{page}", mode="fake", page_size=page, backend=backend)]
        out.append(RunConfig(f"{short}_off_p64", mode="off", page_size=64, backend=backend))
    return out


def fa3meta_set() -> list:
    return [RunConfig("on_p64_fx", page_size=64, env=dict(FA3_FUSED)),
            RunConfig("on_p128_fx", page_size=128, env=dict(FA3_FUSED))]


def inplace_set() -> list:
    return [RunConfig("on_p64_ip", page_size=64, env=dict(FA3_IN_PLACE)),
            RunConfig("on_p128_ip", page_size=128, env=dict(FA3_IN_PLACE))]


def dense_set() -> list:
    return [RunConfig("triton_dense_p64", page_size=64, backend="triton", env=dict(DENSE_DRAFT)),
            RunConfig("triton_on_p1", page_size=1, backend="triton"),
            RunConfig("triton_dense_p128", page_size=128, backend="triton", env=dict(DENSE_DRAFT))]


SETS = {"correct": correct_set, "backends": backends_set, "fa3meta": fa3meta_set, "inplace": inplace_set, "dense": dense_set}


def configs(set_name: str, only: str | None = None) -> list:
    """The set's configurations, or those of ``only`` (comma-separated names: the set's in its order,
    then any of another set, e.g. a profile of ``on_p1`` against ``on_p64_fx``); an unknown set or
    name is a one-line error."""
    if set_name not in SETS:
        raise SystemExit(f"unknown set {set_name!r}; sets: {', '.join(SETS)}")
    cfgs = SETS[set_name]()
    if not only:
        return cfgs
    wanted = [n for n in only.split(",") if n]
    others = {c.name: c for name, make in SETS.items() if name != set_name for c in make()}
    missing = [n for n in wanted if n not in others and n not in {c.name for c in cfgs}]
    if missing:
        raise SystemExit(f"not in set {set_name!r}: {missing}; it has {[c.name for c in cfgs]}")
    return [c for c in cfgs if c.name in wanted] + [others[n] for n in wanted if n in others]


def pairs(spec: str | None) -> list:
    """``A:B`` pairs of configurations of any set (comma-separated; default :data:`AB_PAIRS`)."""
    by_name = {c.name: c for make in SETS.values() for c in make()}
    out = []
    for item in (spec.split(",") if spec else AB_PAIRS):
        a, sep, b = item.partition(":")
        if not sep or a not in by_name or b not in by_name:
            raise SystemExit(f"bad pair {item!r}: want A:B of {sorted(by_name)}")
        out.append((by_name[a], by_name[b]))
    return out
