"""Start and stop one ``sglang.launch_server`` subprocess for a benchmark run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Mapping, Sequence

from sglang_eagle_paged.settings import MODE as ENV_VAR


class ServerStartError(RuntimeError):
    """The server exited or never became healthy; carries the end of its log."""

    def __init__(self, message: str, log_tail: str = ""):
        super().__init__(f"{message}\n--- server log tail ---\n{log_tail}" if log_tail else message)
        self.log_tail = log_tail


def log_tail(path: str | os.PathLike, lines: int = 40) -> str:
    try:
        with open(path, "r", errors="replace") as f:
            return "".join(deque(f, maxlen=lines))
    except OSError:
        return ""


def find_free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def num_draft_tokens_for(topk: int, steps: int, requested: int | None) -> int:
    # A chain (topk 1) verifies one token per step plus the bonus token.
    # SGLang silently rewrites any other value, which would make the
    # recorded configuration disagree with the one that ran.
    if topk == 1:
        return steps + 1
    return requested if requested else topk * steps


def eagle_server_args(
    *,
    model_path: str,
    draft_model_path: str,
    host: str,
    port: int,
    page_size: int,
    topk: int,
    steps: int,
    num_draft_tokens: int | None = None,
    attention_backend: str | None = None,
    algorithm: str = "EAGLE",
    load_format: str | None = None,
    max_total_tokens: int | None = None,
    mem_fraction_static: float | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``sglang.launch_server`` arguments for one EAGLE configuration."""
    args = [
        "--model-path", model_path,
        "--speculative-algorithm", algorithm,
        "--speculative-draft-model-path", draft_model_path,
        "--speculative-eagle-topk", str(topk),
        "--speculative-num-steps", str(steps),
        "--speculative-num-draft-tokens", str(num_draft_tokens_for(topk, steps, num_draft_tokens)),
        "--page-size", str(page_size),
        "--host", host,
        "--port", str(port),
    ]
    if attention_backend:
        args += ["--attention-backend", attention_backend]
    if load_format:
        args += ["--load-format", load_format]
    if max_total_tokens:
        args += ["--max-total-tokens", str(max_total_tokens)]
    if mem_fraction_static:
        args += ["--mem-fraction-static", str(mem_fraction_static)]
    return args + list(extra)


def mode_env(mode: str | None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    if mode:
        env[ENV_VAR] = mode
    return env


class ServerProcess:
    """Context manager around one server subprocess.

    The server runs in its own session so that stop() can signal the whole
    process group: SGLang forks scheduler/detokenizer children that would
    otherwise outlive the parent and keep holding GPU memory.
    """

    def __init__(
        self,
        server_args: Sequence[str],
        *,
        host: str = "127.0.0.1",
        port: int = 30000,
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike = "sglang_server.log",
        startup_timeout: float = 900.0,
        grace_period: float = 30.0,
        command: Sequence[str] | None = None,
    ):
        self.command = list(command) if command is not None else [
            sys.executable, "-m", "sglang.launch_server", *server_args
        ]
        self.host = host
        self.port = port
        self.env = dict(env) if env is not None else None
        self.log_path = Path(log_path)
        self.startup_timeout = startup_timeout
        self.grace_period = grace_period
        self.proc: subprocess.Popen | None = None
        self._log = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "ServerProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._log.write(f"$ {' '.join(self.command)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            self.command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )
        return self

    def wait_ready(self, poll_interval: float = 1.0) -> None:
        import requests

        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(
                    f"server exited with code {code} before becoming healthy (log: {self.log_path})",
                    log_tail(self.log_path),
                )
            try:
                if requests.get(self.base_url + "/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"server not healthy after {self.startup_timeout:.0f}s (log: {self.log_path})",
                    log_tail(self.log_path),
                )
            time.sleep(poll_interval)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            self._signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=self.grace_period)
            except subprocess.TimeoutExpired:
                self._signal_group(proc, signal.SIGKILL)
                proc.wait()
        elif proc is not None:
            # Parent gone already; children of a crashed server may remain.
            self._signal_group(proc, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    @staticmethod
    def _signal_group(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self) -> None:
        """Ask the whole process group to exit, without waiting (see :func:`stop_all`)."""
        if self.proc is not None and self.proc.poll() is None:
            self._signal_group(self.proc, signal.SIGTERM)

    def __enter__(self) -> "ServerProcess":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_all(servers: Sequence[ServerProcess]) -> None:
    """Stop many servers in one grace period rather than one after another.

    Each server drains for up to its grace period on SIGTERM; twelve of them
    stopped in turn can take minutes, which an interrupted run does not have.
    """
    for server in servers:
        server.terminate()
    for server in servers:
        server.stop()  # waits what is left of the grace period, then SIGKILLs
