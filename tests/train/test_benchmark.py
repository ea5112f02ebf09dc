"""The stability/cache benchmark must not rot: its smallest CPU form runs (numbers are not asserted).

It runs in this process (tests/fixtures/benchmarks.py): the same ``main`` as ``python
benchmarks/stability_overhead.py``, without a second interpreter importing torch and coqui.
"""

from __future__ import annotations

import json

from tests.fixtures.benchmarks import left_as_found, load_benchmark


def test_stability_overhead_benchmark_runs_small(tmp_path, capsys):
    bench = load_benchmark("stability_overhead")
    with left_as_found():  # its recipes set torch's thread count and draw from its generator
        code = bench.main(["--steps", "2", "--clips", "6", "--batch-size", "2", "--json", str(tmp_path / "bench.json")])
    out = capsys.readouterr().out
    assert code == 0
    numbers = json.loads((tmp_path / "bench.json").read_text())
    assert numbers["checked_s"] > 0 and numbers["nocache_s"] > 0 and numbers["check_ops_s"] > 0
    assert "overhead" in out and "faster with the cache" in out
