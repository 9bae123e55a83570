"""EAGLE tree speculative decoding on a paged KV cache for SGLang.

Importing this package has no side effects on SGLang: the plugin entry point
(``sglang_eagle_paged.plugin:register``) is what changes SGLang's behaviour.
"""

__version__ = "0.1.0"
