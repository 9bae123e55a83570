"""Run the plugin's cases each in its own interpreter (``register()`` patches SGLang process-wide
and cannot be undone), two at a time, and read the JSON result a probe prints."""

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor


def clean_env(**extra) -> dict:
    """This environment without our settings and SGLang's plugin allow-list, interpreting Triton,
    plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EAGLE_PAGED") and k != "SGLANG_PLUGINS"}
    env["TRITON_INTERPRET"] = "1"
    env.update(extra)
    return env


def run_cases(cases: dict, cwd, timeout: int = 600) -> dict:
    """``{name: (command, extra environment)}`` -> ``{name: CompletedProcess}``."""
    def one(item):
        name, (cmd, extra) = item
        return name, subprocess.run(cmd, env=clean_env(**extra), cwd=cwd, capture_output=True, text=True,
                                    timeout=timeout)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, cases.items()))


def result(p) -> dict:
    """The last ``RESULT {json}`` line of a probe that exited 0."""
    lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])
