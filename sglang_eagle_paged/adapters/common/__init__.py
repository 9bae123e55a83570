"""What both SGLang generations hook: the KV-pool copy, FA3's tree-draft metadata, the debug
prefix check."""
