"""Start one EAGLE server with the plugin, send it one request, stop it: does this install serve?

  python -m bench.smoke --target T --draft D [--load-format dummy] [--page-size 64]

An import check proves that modules load; only a server that answers proves that the modules a
server imports while it starts (the draft worker's CUDA-graph capture pulls in attention backends
that no import check names) are there. Exit 0 when the reply came, 1 with the log's tail when not.
"""

import argparse
import sys
import time

import requests

from sglang_eagle_paged.bench.configs import RunConfig, launch, server_args
from sglang_eagle_paged.bench.server import ServerStartError, find_free_port


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="One EAGLE server with the plugin, one request: does it serve?")
    p.add_argument("--target", required=True, help="target model folder")
    p.add_argument("--draft", required=True, help="EAGLE draft model folder")
    p.add_argument("--load-format", help="e.g. dummy: random weights from the configs")
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--backend", default="fa3")
    p.add_argument("--mode", default="on", help="SGLANG_EAGLE_PAGED for the server (on | off | fake)")
    p.add_argument("--log-dir", default="/tmp/smoke")
    p.add_argument("--timeout", type=float, default=400.0, help="seconds the server may take to start")
    a = p.parse_args(argv)

    cfg = RunConfig("smoke", mode=a.mode, page_size=a.page_size, backend=a.backend)
    port = find_free_port()
    args = server_args(cfg, a.target, a.draft, port, max_total_tokens=16384, mem_fraction=0.3,
                       load_format=a.load_format)
    server, _, _ = launch(cfg, args, port=port, log_dir=a.log_dir, startup_timeout=a.timeout, shared_gpu=False)
    t0 = time.time()
    try:
        server.start()
        server.wait_ready()
        up = time.time() - t0
        r = requests.post(server.base_url + "/generate", timeout=120, json={
            "text": "The quick brown fox", "sampling_params": {"max_new_tokens": 16, "temperature": 0}})
        r.raise_for_status()
        text = r.json()["text"]
    except (ServerStartError, requests.RequestException, KeyError) as exc:
        print(f"[smoke] FAILED: {type(exc).__name__}: {str(exc)[:300]}")
        print(getattr(exc, "log_tail", "") or "")
        return 1
    finally:
        server.stop()
    print(f"[smoke] OK: up in {up:.0f} s, {a.backend} page {a.page_size} mode {a.mode}, replied {text!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
