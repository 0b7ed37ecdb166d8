"""benchmarks.latency.profiles.summarize_profile: where py-spy's samples went, by kso stage and by function."""

from __future__ import annotations

from pathlib import Path

from benchmarks.latency.profiles import summarize_profile


def test_samples_are_shared_out_by_the_innermost_stage(tmp_path: Path) -> None:
    raw = tmp_path / "profile.txt"
    raw.write_text(
        "process 1;thread 2;run (uvicorn/server.py:10);filter (extender/service.py:40);loads (orjson:1) 30\n"
        "process 1;thread 2;run (uvicorn/server.py:10);filter (extender/service.py:40);view (kso/core/cluster.py:9) 50\n"
        "process 1;thread 2;run (uvicorn/server.py:10) 20\n"
        "not a sample line\n")
    lines = summarize_profile(raw)
    assert lines[0] == "  100 samples; by stage (innermost kso stage on the stack):"
    stages = {ln.split("%", 1)[1].strip(): float(ln.split("%", 1)[0]) for ln in lines[1:4]}
    assert stages == {"NodeView gather (ClusterState.view)": 50.0, "JSON parse (orjson.loads)": 30.0,
                      "other (event loop, Starlette/FastAPI routing, uvicorn/httptools)": 20.0}
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert summarize_profile(empty) == ["  (no samples)"]
