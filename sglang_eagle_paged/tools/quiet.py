"""Keep SGLang's own import-time chatter (AWQ, GGUF, CUDA architecture, Triton platform) out of
the tools' reports: on a CPU they are expected and say nothing about the plugin."""

import logging
import warnings


def quiet_sglang() -> None:
    """For the rest of this process: SGLang's warnings ignored, its loggers at ERROR and above; the
    plugin's own start-up lines (INFO, kept for a server's log: sglang_eagle_paged/__init__.py) left
    out too, the tools' reports saying what they show; its warnings and faults stay."""
    warnings.filterwarnings("ignore", module=r"sglang(\.|$)")
    logging.getLogger("sglang").setLevel(logging.ERROR)
    logging.getLogger("sglang_eagle_paged").setLevel(logging.WARNING)


def torch_missing(command: str) -> str | None:
    """One line when torch cannot be imported (the tools need SGLang's torch), else None."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return (f"sglang-eagle-paged {command}: torch cannot be imported ({exc}); install SGLang first "
                "(it brings torch): the plugin runs inside an installed SGLang")
    return None
