"""The device probe that records garbage collections (scripts/device/probes/gc_stats.py, armed by
the probes' sitecustomize with SGLANG_EAGLE_PAGED_GC_STATS): what a server process writes, and how
two readings become one pass's share."""

import json
import os
import subprocess
import sys
import textwrap

from pathlib import Path

PROBES = str(Path(__file__).resolve().parents[2] / "scripts" / "device" / "probes")
sys.path.insert(0, PROBES)
import gc_stats  # noqa: E402


def _run(code: str, env_dir) -> subprocess.CompletedProcess:
    env = {**os.environ, "SGLANG_EAGLE_PAGED_GC_STATS": str(env_dir), "PYTHONPATH": PROBES}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


def _made(path):
    path.mkdir()
    return path


def test_a_process_records_its_collections_per_generation_and_rewrites_them(tmp_path):
    # A process of its own: the record adds a gc callback and a thread for the life of the process.
    out = _run("""
        import gc, time
        import os, gc_stats
        path = gc_stats.install(os.environ.get("SGLANG_EAGLE_PAGED_GC_STATS"))
        assert gc_stats.install(os.environ.get("SGLANG_EAGLE_PAGED_GC_STATS")) == path  # once per process
        gc.collect(0); gc.collect(2); gc.collect(2)
        time.sleep(3 * gc_stats.WRITE_INTERVAL_S)
        print(path)
    """, _made(tmp_path / "gc"))
    assert out.returncode == 0, out.stderr
    (snap,) = gc_stats.read_totals(tmp_path / "gc").values()
    assert out.stdout.strip().endswith(f"gc-{snap['pid']}.json")
    gens = snap["generations"]
    assert gens["0"]["collections"] >= 1 and gens["2"]["collections"] >= 2
    assert all(g["ms"] >= 0 for g in gens.values()) and snap["title"]


def test_without_the_variable_or_with_a_bad_directory_nothing_is_installed(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = _run("""
        import gc
        import os, gc_stats
        print(gc_stats.install(os.environ.get("SGLANG_EAGLE_PAGED_GC_STATS")), len(gc.callbacks))
    """, blocker / "gc")
    assert out.returncode == 0 and out.stdout.split() == ["None", "0"]
    assert "cannot record the collector" in out.stderr
    # a folder that does not exist is not created: the mistyped path is reported
    out = _run("""
        import os, gc_stats
        print(gc_stats.install(os.environ.get("SGLANG_EAGLE_PAGED_GC_STATS")))
    """, tmp_path / "nonexistent" / "dir")
    assert out.returncode == 0 and out.stdout.split() == ["None"], out.stderr
    assert "no such directory" in out.stderr and not (tmp_path / "nonexistent").exists()
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_EAGLE_PAGED_GC_STATS"}
    out = subprocess.run([sys.executable, "-c", "import os, gc_stats; "
                          "print(gc_stats.install(os.environ.get('SGLANG_EAGLE_PAGED_GC_STATS')))"], env={**env, "PYTHONPATH": PROBES}, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "None"


def _snap(pid, title, *per_gen):
    return {"pid": pid, "title": title,
            "generations": {str(g): {"collections": n, "ms": ms} for g, (n, ms) in enumerate(per_gen)}}


def test_difference_sums_processes_and_counts_a_new_one_from_zero():
    before = {1: _snap(1, "sglang::scheduler", (10, 1.0), (1, 0.5), (0, 0.0))}
    after = {1: _snap(1, "sglang::scheduler", (14, 1.8), (2, 0.9), (1, 30.0)),
             2: _snap(2, "python3", (3, 0.3), (0, 0.0), (0, 0.0))}  # started after the first reading
    d = gc_stats.difference(before, after)
    assert d["generations"]["0"] == {"collections": 7, "ms": 1.1}
    assert d["generations"]["2"] == {"collections": 1, "ms": 30.0}
    assert d["ms"] == 31.5
    assert d["by_process"] == {"sglang::scheduler": {"collections": 6, "ms": 31.2},
                               "python3": {"collections": 3, "ms": 0.3}}


def test_a_torn_file_is_skipped(tmp_path):
    (tmp_path / "gc-1.json").write_text(json.dumps(_snap(1, "a", (1, 0.1), (0, 0), (0, 0))))
    (tmp_path / "gc-2.json").write_text("{")  # mid-write (the writer replaces atomically; a reader may still race)
    assert list(gc_stats.read_totals(tmp_path)) == [1]


def test_the_probes_sitecustomize_arms_the_record_in_every_process_that_starts_with_it(tmp_path):
    out = _run("""
        import sys
        print(sys.modules["gc_stats"]._state["installed"])
    """, _made(tmp_path / "gc"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(".json") and len(gc_stats.read_totals(tmp_path / "gc")) == 1


def test_a_forked_child_drops_the_inherited_callback(tmp_path):
    out = _run("""
        import gc, os
        import os, gc_stats
        gc_stats.install(os.environ.get("SGLANG_EAGLE_PAGED_GC_STATS"))
        before = len(gc.callbacks)
        pid = os.fork()
        if pid == 0:  # the child: no writer thread came along, so no callback either
            os._exit(0 if len(gc.callbacks) == before - 1 else 1)
        _, status = os.waitpid(pid, 0)
        print(before, os.waitstatus_to_exitcode(status), len(gc.callbacks))
    """, _made(tmp_path / "gc"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0", "1"]  # the parent keeps its own
