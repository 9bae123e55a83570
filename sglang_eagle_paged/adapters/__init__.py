"""SGLang glue, one subpackage per SGLang generation (``v1``, ``v2``) and what both hook
(``common``). :mod:`sglang_eagle_paged.releases` picks the generation; each adapter's
``hooks(settings)`` lists its :class:`~sglang_eagle_paged.hooks.Hook` records."""
