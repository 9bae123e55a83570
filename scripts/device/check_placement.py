"""Check ``bench.ab``'s CPU placements on a real SGLang server (one short device call).

Starts one small server (testbed shape, dummy weights, the triton backend, no CUDA graphs: quick
to start, no FA3 needed) pinned to a CPU set, then re-pins it as ``--isolate-scheduler`` and
``--swap-cpus`` do (``cpu_pinning.repin_server``), and records what it found: every process of
the server's session with its title, threads and the masks read back from the kernel. A request
before and after the moves checks that the server still answers.

    timeout 240 python3 scripts/device/check_placement.py --out $OUT/placement

Run 16 tried it in the last 110 s of its device time: the server had not answered /health by then.
Run 17 ran it after core (about 60 s): every placement read back as asked
(``bench/results/2026-12-01-h200-run17/placement/``).
"""

import argparse
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import cpu_pinning  # noqa: E402
from sglang_eagle_paged.bench.server import ServerProcess  # noqa: E402


def _threads(pid: int) -> dict:
    masks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            masks[int(tid)] = sorted(os.sched_getaffinity(int(tid)))
        except OSError:
            pass
    return masks


def snapshot(leader: int) -> list:
    rows = []
    for p in cpu_pinning.session_pids(leader):
        masks = _threads(p)
        rows.append({"pid": p, "title": cpu_pinning.process_title(p), "main_thread": masks.pop(p, None),
                     "other_threads": sorted({tuple(m) for m in masks.values()})})
    return rows


def ask(server: ServerProcess) -> str:
    import requests

    r = requests.post(server.base_url + "/generate", json={"text": "Hello", "sampling_params": {
        "max_new_tokens": 4, "temperature": 0}}, timeout=60)
    return f"{r.status_code}: {r.json().get('meta_info', {}).get('completion_tokens')} tokens"


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="sglang_eagle_paged/testbed/target")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cpus = cpu_pinning.plan(cpu_pinning.available(), 2)
    first, second = cpus["servers"]
    args = ["--model-path", a.model, "--load-format", "dummy", "--attention-backend", "triton",
            "--page-size", "1", "--mem-fraction-static", "0.2", "--disable-cuda-graph",
            "--disable-piecewise-cuda-graph", "--grammar-backend", "none", "--sampling-backend", "pytorch",
            "--log-level", "warning", "--port", "30700"]
    server = ServerProcess(args, port=30700, log_path=out / "server.log", startup_timeout=300, cpus=first)
    record = {"sets": cpus}
    # `timeout` sends SIGTERM: stop the server and keep what was found (run 16's call 12 lost it).
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        server.start().wait_ready()
        record["before"] = {"processes": snapshot(server.proc.pid), "request": ask(server)}
        record["isolated"] = {"moved": cpu_pinning.repin_server(server.proc.pid, first, isolate_scheduler=True),
                              "processes": snapshot(server.proc.pid), "request": ask(server)}
        record["swapped"] = {"moved": cpu_pinning.repin_server(server.proc.pid, second, isolate_scheduler=True),
                             "processes": snapshot(server.proc.pid), "request": ask(server)}
    except (Exception, KeyboardInterrupt) as exc:  # the record says how far it got
        record["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    finally:
        server.stop()
        (out / "placement.json").write_text(json.dumps(record, indent=1, default=str))
    schedulers = [p for p in record.get("isolated", {}).get("processes", [])
                  if p["title"].startswith(cpu_pinning.SCHEDULER_TITLE)]
    print(json.dumps({"error": record.get("error"), "schedulers": schedulers,
                      "requests": [record.get(k, {}).get("request") for k in ("before", "isolated", "swapped")]},
                     default=str))
    return 0 if schedulers and "error" not in record else 1


if __name__ == "__main__":
    raise SystemExit(main())
