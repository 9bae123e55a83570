"""What a live server holds: SGLang's ``/v1/loads``, idleness, ``/flush_cache``, ``/health_generate``."""

from __future__ import annotations

import threading
import time


def loads(base_url: str, timeout: float = 10.0) -> dict:
    """Running/waiting requests and KV tokens held (``/v1/loads``), summed over DP ranks.

    SGLang's ``num_used_tokens`` is the pool minus free minus evictable (radix-cached,
    unreferenced) tokens: at idle, with nothing leaked, it is 0.
    """
    import requests

    r = requests.get(base_url.rstrip("/") + "/v1/loads", params={"include": "core"}, timeout=timeout)
    r.raise_for_status()
    per_rank = r.json().get("loads") or []
    total = lambda k: sum(int(d.get(k) or 0) for d in per_rank)  # noqa: E731
    return {
        "num_running_reqs": total("num_running_reqs"),
        "num_waiting_reqs": total("num_waiting_reqs"),
        "num_used_tokens": total("num_used_tokens"),
        "max_total_num_tokens": total("max_total_num_tokens"),
        "token_usage": max((float(d.get("token_usage") or 0) for d in per_rank), default=0.0),
    }


class LoadPoller:
    """Samples :func:`loads` in the background: the peaks show whether the pool was under pressure."""

    def __init__(self, base_url: str, interval: float = 0.5):
        self.base_url, self.interval = base_url, interval
        self.peak = {"num_running_reqs": 0, "num_waiting_reqs": 0, "num_used_tokens": 0, "token_usage": 0.0}
        self.samples = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                cur = loads(self.base_url)
                for k in self.peak:
                    self.peak[k] = max(self.peak[k], cur[k])
                self.samples += 1
            except Exception:
                self.failures += 1
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)

    def result(self) -> dict:
        return {"peak": dict(self.peak), "samples": self.samples, "failures": self.failures}


def wait_idle(base_url: str, timeout: float = 120.0, interval: float = 0.5) -> float | None:
    """Seconds until no request runs or waits; None if that never happened within ``timeout``."""
    t0 = time.monotonic()
    while True:
        try:
            cur = loads(base_url)
            if cur["num_running_reqs"] == 0 and cur["num_waiting_reqs"] == 0:
                return round(time.monotonic() - t0, 2)
        except Exception:
            pass
        if time.monotonic() - t0 > timeout:
            return None
        time.sleep(interval)


def _status(method: str, url: str, timeout: float = 60.0) -> int | str:
    import requests

    try:
        return requests.request(method, url, timeout=timeout).status_code
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:200]


def idle_check(base_url: str, *, idle_s: float = 10.0, drain_timeout: float = 120.0) -> dict:
    """After a workload: drain, stay idle (SGLang checks its pools on every idle pass), then look.

    Returns the drain time, ``/v1/loads`` after the idle period, ``/flush_cache``'s status
    and the loads after it, and ``/health_generate`` (a real one-token generation).
    """
    base = base_url.rstrip("/")
    out: dict = {"drain_s": wait_idle(base, drain_timeout)}
    time.sleep(idle_s)
    for key, fn in (("loads_idle", lambda: loads(base)),):
        try:
            out[key] = fn()
        except Exception as exc:
            out[key] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    out["flush_cache_status"] = _status("POST", base + "/flush_cache")
    time.sleep(1.0)
    try:
        out["loads_after_flush"] = loads(base)
    except Exception as exc:
        out["loads_after_flush"] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
    out["health_generate_status"] = _status("GET", base + "/health_generate", timeout=60)
    out["health_status"] = _status("GET", base + "/health")
    return out
