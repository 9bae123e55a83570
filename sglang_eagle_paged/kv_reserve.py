"""The KV reserve SGLang's v2 worker keeps per running request: the formula lives with the rest of the
tree layout's arithmetic (:mod:`sglang_eagle_paged.tree_layout`); these names stay for the tools and
benchmarks that read them here."""

from .tree_layout import held_beyond_committed, len_per_decode, reserve_per_decode, slots_per_request  # noqa: F401
