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


class _KeepStartUpLines(logging.Filter):
    """The plugin's INFO lines say what it decided at start-up (active or not, which layout, which copy
    path): the record a benchmark reads to name the path a server ran (bench/server_log.py). They stay
    INFO, not being problems, and stay visible where SGLang is asked for warnings only
    (``--log-level warning``): this logger lets everything through (its level: DEBUG) and this
    filter drops a line only where the root logger's level (SGLang's ``--log-level``, set by its
    ``configure_logger``) would drop it and it is not an INFO line under a WARNING level. At ERROR
    and above the plugin is as quiet as SGLang, from the moment SGLang applies the level: plugins
    load before it does (the root logger is then at Python's WARNING, with the handler SGLang's
    modules add on import), so the lines of ``plugin.register`` show at every level."""

    def filter(self, record: logging.LogRecord) -> bool:
        asked = logging.getLogger().getEffectiveLevel()
        return record.levelno >= asked or (record.levelno == logging.INFO and asked <= logging.WARNING)


_logger = logging.getLogger("sglang_eagle_paged")
for _filter in (_MarkFaults, _KeepStartUpLines):
    if not any(isinstance(f, _filter) for f in _logger.filters):
        _logger.addFilter(_filter())
if _logger.level == logging.NOTSET:  # a level set before (a test, a logging config) is kept
    _logger.setLevel(logging.DEBUG)
