"""User tools: the CLI, doctor, the CPU demo, the patch command, and the harnesses that drive SGLang's
real pools for them and for the tests. Serving code never imports this package."""
