"""The adversarial suite in CI (benchmarks/adversarial.py, short): a real `kso extender` on loopback is
sent the worst requests its default bounds allow and ones past them, with slow clients holding
connections, for a few seconds. Checks, with margins for a shared CI machine (the measured figures are
in benchmarks/README.md): every request gets its expected status, /healthz on the admin port answers
within 1 s throughout, slow clients are cut off, memory stays under the ceiling, SIGTERM exits cleanly."""

from __future__ import annotations

from benchmarks.adversarial import run

# Memory ceiling of the server and its children under attack: idle is ~230 MiB (demo cluster, agents,
# numpy, OR-Tools imported); the worst allowed requests (two 1 MiB full-node bodies at a time) add ~50.
RSS_CEILING_MIB = 600
HEALTHZ_MARGIN_S = 1.0


def test_adversarial_suite_stays_responsive_and_bounded() -> None:
    out = run(seconds=8.0, heavy_clients=2, report=lambda _text: None)
    assert out["wrong"] == [], out["wrong"]
    assert all(v["n"] > 0 for v in out["requests"].values()), out["requests"]
    assert out["healthz_ms"]["n"] > 20 and out["healthz_ms"]["max"] < 1000 * HEALTHZ_MARGIN_S, out["healthz_ms"]
    assert out["rss_mib"]["peak"] < RSS_CEILING_MIB, out["rss_mib"]
    assert out["slow_client_held_s"] < 5.0  # header timeout 2 s in the suite's settings
    assert out["exit_code"] == 0
