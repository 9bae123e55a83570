"""The v2 adapter: SGLang's overlap-scheduled v2 worker (0.5.13 .. 0.5.23).

One hot-path hook: the paged tree draft's prefix-tail duplication
(``duplicate_prefix_tail_to_draft_branches``, :mod:`.duplicate`), in the module home of the
installed release (:mod:`.hook_points`). Every hook is built in one module (:mod:`.hook_table`),
every SGLang name hooked or read is in one (:mod:`.sglang_api`); ``doctor``'s v2 lines are
:mod:`sglang_eagle_paged.tools.doctor_v2`. What serves each draft runner is decided once, when the
draft worker's pool and backend exist (:mod:`.draft_plan`, :mod:`.warm_up`); everything of ours
that runs per draft step is :mod:`.draft_step`, under one fault switch (:mod:`.fault`). Which pools
our kernel copies is :mod:`.pools`. With
``SGLANG_EAGLE_PAGED_FA3_IN_PLACE`` on, fa3's draft reads the prefix tail in place and nothing is
copied for it (:mod:`.fa3_in_place`; off by default: measured slower than the fused copy). FA3's
tree-draft metadata builders are replaced as on v1 (:mod:`.fa3_replay`; ``SGLANG_EAGLE_PAGED_FA3_EXPAND``,
fused by default where proven).
"""

import logging

from ...settings import Mode
from . import hook_points
from .hook_points import check_hook_points  # noqa: F401  (the release table's check)

GENERATION = "v2"
logger = logging.getLogger("sglang_eagle_paged")


def hooks(settings_or_mode, version: str | None = None) -> list:
    """The v2 hooks for a :class:`~sglang_eagle_paged.settings.Settings` or a mode (on, fake;
    off installs nothing), for ``version`` (default: the installed SGLang): :mod:`.hook_table`."""
    from . import hook_table

    return hook_table.hooks(settings_or_mode, version)


def warm_up_targets() -> list:
    """The draft worker classes' own ``init_attention_backend`` in the SGLang importable here."""
    from . import hook_table

    return hook_table.warm_up_targets()


def installed(hooked: list) -> None:
    """Nothing to switch on after the hooks took: the duplication hook decides per pool."""


def describe(settings_or_mode, hooked: list) -> str:
    from .hook_table import mode_of

    mode = mode_of(settings_or_mode)
    dup = [t for t in hooked if t.endswith("." + hook_points.FUNCTION)]
    copy = "one-launch duplication on plain MHA pools, SGLang's own elsewhere" if mode is Mode.ON else \
        "skipped (fake)"
    from . import fa3_replay

    return (f"draft duplication={dup[0] if dup else 'SGLang' + chr(39) + 's'} ({copy}), "
            f"fa3 metadata={fa3_replay.describe(hooked)}")
