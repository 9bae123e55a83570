"""EAGLE tree speculative decoding on a paged KV cache for SGLang.

Importing this package has no side effects on SGLang: the plugin entry point
(``sglang_eagle_paged.plugin:register``) is what changes SGLang's behaviour.
"""

import logging

__version__ = "0.1.0"

# Every line the plugin logs at ERROR or above (a switch-off after a fault, a failed warm-up, a
# prefix violation: SGLang's path serves on, ours is off) carries this mark, put there by the
# plugin's logger itself, so that a benchmark can refuse to report a figure measured over such a
# fallback (bench/server_log.py) without a list of messages that a new one could be missing from.
FAULT_MARK = "[sglang-eagle-paged] [fault] "
_PREFIX = "[sglang-eagle-paged] "


class _MarkFaults(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and isinstance(record.msg, str) and not record.msg.startswith(FAULT_MARK):
            record.msg = FAULT_MARK + record.msg.removeprefix(_PREFIX)
        return True


_logger = logging.getLogger("sglang_eagle_paged")
if not any(isinstance(f, _MarkFaults) for f in _logger.filters):
    _logger.addFilter(_MarkFaults())
