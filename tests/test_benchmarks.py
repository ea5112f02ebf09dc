"""Benchmarks must not rot: each one runs here in its smallest CPU form (numbers are not asserted)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.fixtures.benchmarks import left_as_found, load_benchmark
from tests.fixtures.hub import StandInHub, serve_hub
from xtts_ft.base_model import REQUIRED_FILES

pytestmark = pytest.mark.slow  # each test runs a benchmark script end to end


def run_throughput(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``python benchmarks/gpu_throughput.py ARGV``, run in this process (no interpreter start, no second import of
    torch and coqui); its stdout."""
    bench = load_benchmark("gpu_throughput")
    with left_as_found():
        bench.main(argv)
    return capsys.readouterr().out


def test_gpu_throughput_benchmark_runs_small_on_cpu(tmp_path, capsys):
    out = run_throughput(["--size", "small", "--steps", "1", "--batches", "2", "--precisions", "fp32,bf16",
                          "--json", str(tmp_path / "rows.json")], capsys)
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert {r["precision"] for r in rows} == {"fp32", "bf16"}
    assert all(r["samples_per_s"] > 0 for r in rows)
    # coqui's forward and ours side by side, on equal-length and on realistically padded batches
    assert {(r["path"], r["lengths"], r["precision"]) for r in rows} == {
        (p, x, q) for p in ("coqui", "fast") for x in ("equal", "padded") for q in ("fp32", "bf16")}
    assert out.count("against coqui: fast") == 4
    assert all(abs(sum(r[f"{k}_pct"] for k in ("data", "forward", "backward", "optimizer")) - 100) < 1e-6 for r in rows)
    assert "bf16 / fp32 best samples/s" in out
    loader = json.loads((tmp_path / "rows.json").read_text())["loader"]
    assert loader["batch"] == 2 and loader["workers"] == 2 and loader["samples_per_s"] > 0
    assert "data loader (real ClipDataset + collate, 2 workers" in out and "needs" in out


def test_the_data_loader_is_measured_alone_at_full_clip_length(tmp_path, capsys):
    out = run_throughput(["--size", "full", "--loader-only", "--batches", "4", "--steps", "1", "--loader-workers", "0",
                          "--json", str(tmp_path / "rows.json")], capsys)
    result = json.loads((tmp_path / "rows.json").read_text())
    assert result["rows"] == [] and result["loader"]["samples_per_s"] > 0  # no model was built or trained
    assert "M params" not in out


def test_gpu_throughput_benchmark_runs_with_gradient_checkpointing(tmp_path, capsys):
    out = run_throughput(["--size", "small", "--steps", "1", "--batches", "2", "--precisions", "fp32",
                          "--gradient-checkpointing", "--json", str(tmp_path / "rows.json")], capsys)
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert {(r["path"], r["lengths"]) for r in rows} == {(p, x) for p in ("coqui", "fast") for x in ("equal", "padded")}
    assert all(r["gradient_checkpointing"] is True and r["samples_per_s"] > 0 for r in rows)  # both forwards
    assert "gradient checkpointing on" in out


def test_full_size_rehearsal_runs_every_stage_on_the_tiny_model(tmp_path):
    """The rehearsal's smallest form: the same stages and measurements, on the tiny model (two evaluation sentences
    of ten audio codes each: a random model never stops, so each sample costs its full token budget, three
    evaluations over)."""
    out = subprocess.run(
        [sys.executable, "benchmarks/full_size_rehearsal.py", "--size", "tiny", "--steps", "1", "--threads", "1",
         "--eval-sentences", "2", "--max-new-tokens", "10", "--out", str(tmp_path / "rehearsal")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    result = json.loads((tmp_path / "rehearsal" / "rehearsal.json").read_text())
    names = [s["stage"] for s in result["stages"]]
    assert names == ["write_tiny_model", "train_first_run", "train_resumed_run", "checkpoint_load_and_save",
                     "evaluate_checkpoint", "export", "synthesize"]
    assert all(s["peak_rss_mb"] > 0 and s["wall_s"] > 0 for s in result["stages"])
    assert result["resumed_from"][-1].endswith("step_000001")  # the second run continued the first
    assert result["sizes"]["checkpoint_mb"] > 0 and result["sizes"]["export_mb"] > 0 and result["synthesis_rtf"]
    assert result["eval_sentences"] == 2 and result["synthesis_rtf"]["n"] == 2 * 3  # three evaluations: two runs, --evaluate
    run_config = yaml.safe_load((tmp_path / "rehearsal" / "run" / "config.yaml").read_text(encoding="utf-8"))
    assert run_config["evaluation"]["max_new_tokens"] == 10  # the runs got the sample budget asked for



@pytest.fixture
def hub(tiny_base_dir):
    with serve_hub({name: (tiny_base_dir / name).read_bytes() for name in REQUIRED_FILES}) as url:
        yield url


def test_gpu_smoke_runs_every_section_in_its_reduced_cpu_mode(tmp_path, hub):
    """With a repo id served by the stand-in Hub: every section, the stop section's child process too, trains
    the downloaded model; nothing is written under the repo id's name (it is not taken as a folder)."""
    repo_id = "smoke-standin/XTTS-v2"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf"),
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    out = subprocess.run(
        [sys.executable, "benchmarks/gpu_smoke.py", "--cpu", "--quick", "--precision", "fp16", "--out",
         str(tmp_path / "smoke"), "--base-model", repo_id],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, env=env,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    titles = ["device and precision", "short training run", "batch-size probe vs real peak", "resume equality",
              "evaluation inputs vs training inputs",
              "offload_frozen, gradient checkpointing, evaluation, out-of-memory split, fp16 fallback",
              "stop (SIGTERM) and checkpoint save time", "two GPUs (torchrun)", "throughput",
              "serving: first audio, streams, half-precision HiFiGAN"]
    positions = [out.stdout.find(f"## {n}. {t}") for n, t in enumerate(titles, 1)]
    assert -1 not in positions and positions == sorted(positions), positions
    assert "loss_scale 1024.0  precision fp16" in out.stdout  # the fp16 scaler trace, per step
    assert "bit-identical True" in out.stdout and "codes equal to a fresh DVAE pass for 4 of 4 clips" in out.stdout
    assert "injected out-of-memory errors 1, micro-batches split 1" in out.stdout
    assert "switched to ['fp32'] (expected fp32)" in out.stdout  # a CPU has no bf16 to fall back to
    assert "SIGTERM -> exit 0" in out.stdout and "full-size XTTS-v2 checkpoint: 5.5 GB" in out.stdout
    assert re.search(r"1 stream\(s\): first audio p50 \d+ ms, max \d+ ms; .* real time in aggregate \(RTF", out.stdout)
    assert "2 stream(s): first audio" in out.stdout and "the engine streamed audio to 1 and 2 concurrent callers" in out.stdout
    assert "HiFiGAN fp16/bf16 vs fp32: not measured (no CUDA here" in out.stdout
    assert re.search(r"batch +2: reference .* ratio reference/current \d+\.\d+x, current/fixed shapes \d+\.\d+x, .*; "
                     r"codes identical; fixed shapes: \d+ recording", out.stdout)
    assert re.search(r"prefill of +2 requests: .* codes of the next 10 steps identical", out.stdout)
    assert re.search(r"windows +2: one by one .* together .* kept audio max relative difference", out.stdout)
    assert "## summary: 12 of 12 checks passed" in out.stdout and "FAIL" not in out.stdout
    assert not (REPO_ROOT / "smoke-standin").exists() and not (tmp_path / "smoke" / "tiny_base").exists()
    assert any(r.startswith("GET") and r.endswith("/model.pth") for r in StandInHub.requests)
    cache = str(tmp_path / "hf")
    for run in ("train", "resume", "memory_options", "stop"):  # in-process runs and the child process
        metas = list((tmp_path / "smoke" / run / "checkpoints").glob("step_*/meta.json"))
        assert metas and all(json.loads(m.read_text())["base_model"].startswith(cache) for m in metas), run


def test_trainable_cost_benchmark_measures_each_option_small(capsys):
    """In-process (the full benchmark runs each option in a child process, for its own peak RSS)."""
    import argparse

    bench = load_benchmark("trainable_cost")
    args = argparse.Namespace(size="small", steps=1, batch=1, text_len=8, codes_len=12, cond_frames=64,
                              device="cpu", threads=1)
    with left_as_found():
        rows = [bench.measure(mode, args) for mode in bench.MODES]
    bench.print_table(rows, args)
    trained = {r["mode"]: r["trained_m"] for r in rows}
    assert 0 < trained["lora"] < trained["freeze"] < trained["all"] == rows[0]["gpt_params_m"]
    assert all(r["step_s"] > 0 and r["step_cpu_s"] > 0 and r["optimizer_state_mb"] > 0 for r in rows)
    assert "CPU time of all" in capsys.readouterr().out.splitlines()[3]  # each option's cost next to all's


def test_padded_batches_have_a_real_length_spread_sorted_as_the_sampler_sorts():
    bench = load_benchmark("gpu_throughput")
    spread = bench.demo_spread()
    assert len(spread) == 66 and 2.0 < min(s for _, s in spread) < max(s for _, s in spread) < 10.5
    batches = bench.padded_batches(bench.SMALL, 4, 6, cond_frames=20)
    longest_codes = bench.SMALL["max_mel_tokens"] - 5
    for text, text_lens, codes, wav_lens, _, _ in batches:
        assert text.shape[1] == int(text_lens.max()) and codes.shape[1] == -(-int(wav_lens.max()) // 1024)
        assert int(wav_lens.max()) <= longest_codes * 1024 and int(text_lens.max()) <= bench.SMALL["max_text_tokens"]
        assert int(wav_lens.min()) > 0.6 * int(wav_lens.max())  # length-bucketed: rows of a batch are alike
    assert len({int(b[3].max()) for b in batches}) > 3  # ... and batches differ from each other


def test_silent_gaps_are_the_waits_for_chunks_after_the_audio_ran_out():
    """A listener plays each chunk as it comes, from the first: only a chunk that arrives after the audio before it
    has run out adds silence (the wait), and playback goes on from its arrival."""
    gaps = load_benchmark("engine_load").silent_gaps
    assert gaps([]) == 0.0 and gaps([(5.0, 0.25)]) == 0.0
    assert gaps([(1.0, 0.25), (1.2, 1.0), (2.0, 1.0)]) == 0.0  # each came while the audio before it played
    assert gaps([(1.0, 0.25), (1.5, 1.0), (2.5, 0.5)]) == pytest.approx(0.25)  # 1.25 -> 1.5; then 2.5 <= 2.5
    assert gaps([(1.0, 0.25), (1.5, 0.5), (2.5, 0.5)]) == pytest.approx(0.25 + 0.5)  # and 2.0 -> 2.5


def test_engine_load_benchmark_prints_a_row_per_path_small(capsys, tmp_path):
    """One and two callers, four codes per piece: one row per clients count and path with its latency, throughput and
    memory columns. The benchmark's main runs in this process (it writes the export) and starts one worker process
    for all rows (--one-process: the model loaded once, each path's engine kept for the second clients count).
    --profile: the lone callers' rounds under torch's profiler, every thread's operations (the GPT decodes in the
    loop's thread, HiFiGAN runs in the readers'): the traces written, the top operations listed under the rows."""
    bench = load_benchmark("engine_load")
    profiles = tmp_path / "profiles"
    with left_as_found():
        bench.main(["--size", "tiny", "--clients", "1", "2", "--max-codes", "4", "--threads", "1", "--one-process",
                    "--warmup-rounds", "1", "--profile", str(profiles)])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.search(r" x[12] ", line)]
    assert [row.split()[:2] for row in rows] == [[path, count] for count in ("x1", "x2")
                                                 for path in ("engine", "per-piece", "coqui-stream")], out
    number = r"\d+\.\d+"
    for row in rows:
        assert re.search(rf"first audio p50 {number} s, p95 {number} s; silent after it p95 {number} s, max {number} "
                         rf"s; {number} s of audio per s "
                         rf"\({number} s in {number} s\); peak \d+ MB", row), row
    assert "failed" not in out and "every clients count and path in one process" in out
    assert "1 untimed round(s)" in out
    lines = out.splitlines()
    for engine_row in (rows[0], rows[3]):
        under_engine = lines[lines.index(engine_row) + 1]  # the engine's first chunks, part by part
        assert re.fullmatch(r" +first chunk, median ms: prepare \d+, to first code \d+, decoding \d+, handoff \d+, "
                            r"vocoding \d+, finish \d+ \(total \d+\)", under_engine), out
    traces = {p.name for p in profiles.iterdir()}
    assert traces == {f"trace-{path}-x1.json.gz" for path in ("engine", "per-piece", "coqui-stream")}, "x1 rows only"
    assert out.count("most CPU time of their own:") == 3 and len(re.findall(r"^ +\d+\.\d ms +\d+ x  aten::", out, re.M)) >= 15
    threads: dict[str, set] = {}
    for event in json.loads(gzip.decompress((profiles / "trace-engine-x1.json.gz").read_bytes()))["traceEvents"]:
        if event.get("name") in ("aten::exponential_", "aten::mkldnn_convolution"):
            threads.setdefault(event["name"], set()).add(event.get("tid"))
    draws, convolutions = threads.get("aten::exponential_", set()), threads.get("aten::mkldnn_convolution", set())
    assert draws and convolutions and not draws & convolutions, "the loop's draws and the readers' HiFiGAN, each thread's"


def test_a_profiler_that_fails_costs_the_profile_not_the_row(tmp_path, monkeypatch, capsys):
    """On a card a failing profiler must not take the row, and the larger clients counts after it, with it; and a
    profile folder that holds traces already is refused (the traces' names are fixed)."""
    bench = load_benchmark("engine_load")
    rounds = []

    def one_round():
        rounds.append(1)
        return "results"

    def broken(*_args):
        raise RuntimeError("Kineto failed to start\ndetails")

    kept = tmp_path / "earlier"
    kept.mkdir()
    (kept / "trace-engine-x1.json.gz").write_bytes(b"an earlier trace")
    with pytest.raises(SystemExit):  # a folder with traces in it is refused before anything runs
        bench.main(["--size", "tiny", "--profile", str(kept)])
    assert "--profile" in capsys.readouterr().err and (kept / "trace-engine-x1.json.gz").read_bytes() == b"an earlier trace"
    monkeypatch.setattr(bench, "_profiled_round", broken)
    result, summary = bench._profiled(one_round, tmp_path / "trace.json.gz", None)
    assert (result, summary, rounds) == ("results", {"error": "Kineto failed to start"}, [1])
    bench._print_row({"path": "engine-graphs", "clients": 1, "ttfa_p50": 0.1, "ttfa_p95": 0.1, "gaps_p95": 0.0,
                      "gaps_max": 0.0, "audio_per_s": 3.0,
                      "audio_s": 3.0, "wall_s": 1.0, "peak_mb": 900.0, "peak_gpu_mb": None, "profile": summary})
    assert "profile failed (Kineto failed to start); the row is from a round run again without it" in \
        capsys.readouterr().out


def test_reader_wakeups_benchmark_compares_both_notifications_and_their_codes(capsys):
    """The small GPT, four callers, one round: a row with both ways' times and wake-ups, fewer wake-ups when readers
    are woken per chunk, and the same codes either way."""
    bench = load_benchmark("reader_wakeups")
    with left_as_found():
        bench.main(["--callers", "4", "--codes", "30", "--first", "4", "--every", "8", "--rounds", "1", "--threads", "1"])
    out = capsys.readouterr().out
    found = re.search(r"callers +4: every code \d+ ms \(\d+ steps/s, (\d+) wake-ups\); chunk ready \d+ ms \(\d+ steps/s, "
                      r"(\d+) wake-ups\); ratio \d+\.\d+x; codes identical", out)
    assert found, out
    every_code, chunk_ready = map(int, found.groups())
    assert chunk_ready <= 4 * 5 < every_code  # 4 readers: a first chunk, 3 more, the end; against one per code


def test_sampling_draw_benchmark_counts_both_ways_and_checks_their_codes(capsys):
    """Both draws from the same probabilities: a row per batch size with the operations and times each way, and the
    codes and generator states found the same (the benchmark's exit status says whether they were)."""
    bench = load_benchmark("sampling_draw")
    assert bench.main(["--batches", "1", "4", "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \| [\d.]+ ms \| [\d.]+ ms \| [\d.]+x \| yes \|$", out, re.M)
    assert [r[0] for r in rows] == ["1", "4"], out
    for _, row_by_row, drawn in rows:
        assert int(drawn) < int(row_by_row), "fewer operations per step than multinomial row by row"


def test_reader_host_work_benchmark_plans_both_ways_and_checks_their_frames(capsys):
    """Both vocoders through one short utterance: rows with the operations and times each way, the frames found the
    same (the exit status says whether they were), fewer operations now, and the voice lookup timed both ways."""
    bench = load_benchmark("reader_host_work")
    assert bench.main(["--codes", "100", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\| \d+ \| (\d+) \| (\d+) \| (\d+) \| \d+ us \| \d+ us \| [\d.]+x \| yes \|$", out, re.M)
    assert len(rows) >= 3 and rows[-1][0] == "100", out
    assert all(int(now) < int(first) for _, first, now in rows), "fewer operations per plan than the first way"
    assert "frames identical: yes" in out and re.search(r"voice lookup \(\d+ KB clip\): read and hashed \d+ us", out)


def test_eval_speed_benchmark_compares_old_and_new_vocoding_small(capsys, tiny_base_dir):
    """In-process, two short samples, one round: both paths run and their audio agrees to float rounding."""
    bench = load_benchmark("eval_speed")
    with left_as_found():
        bench.main(["--samples", "2", "--codes", "6", "--rounds", "1", "--base-model", str(tiny_base_dir)])
    out = capsys.readouterr().out
    assert re.search(r"round 1: old \d+\.\d+ s, new \d+\.\d+ s", out), out
    found = re.search(r"ratio \d+\.\d+x; max \|old - new\| (\S+)", out)
    assert found and float(found.group(1)) <= 1e-5, out


def test_vocoder_windows_benchmark_times_both_ways_and_checks_the_kept_audio(capsys):
    bench = load_benchmark("vocoder_windows")
    with left_as_found():
        bench.main(["--batches", "1", "3", "--frames", "20", "30", "--repeats", "1"])
    out = capsys.readouterr().out
    assert re.search(r"weight norm, one window of 20 frames: recomputed \d+\.\d+ ms; folded \(\d+ convolutions\) "
                     r"\d+\.\d+ ms; ratio \d+\.\d+x; audio identical", out), out
    rows = [line for line in out.splitlines() if line.startswith("windows")]
    assert len(rows) == 2, rows
    for row in rows:
        found = re.search(r"one by one \d+\.\d+ ms; together \d+\.\d+ ms; ratio \d+\.\d+x; kept audio max relative "
                          r"difference (\S+)$", row)
        assert found and float(found.group(1)) <= 1e-4, row


def test_decode_step_benchmark_times_the_decoders_and_checks_their_codes(capsys):
    """The small GPT, two batch sizes, a few steps: a row per batch size with the four times (the first decoder,
    the current one, the current one's fixed-shape step, which a CUDA graph replays on a GPU, and the same with its
    head replayed too), the ratios and the codes found identical (the benchmark fails when the first two disagree,
    or when a fixed-shape step or head turns off); and a row of the operations each launches one by one per step."""
    bench = load_benchmark("decode_step")
    with left_as_found():
        bench.main(["--size", "small", "--batches", "1", "3", "--warmup", "2", "--steps", "3"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("batch") and "ms/step" in line]
    assert len(rows) == 2, out
    for row in rows:
        assert re.search(r"reference \d+\.\d+ ms/step .*; current \d+\.\d+ ms/step .*; fixed shapes \d+\.\d+ ms/step "
                         r".*; fixed shapes \+ head \d+\.\d+ ms/step .*; fixed shapes \+ head \+ fused GELU \d+\.\d+ "
                         r"ms/step .*; ratio reference/current \d+\.\d+x, current/fixed shapes \d+\.\d+x, fixed shapes/"
                         r"fixed shapes \+ head \d+\.\d+x, fixed shapes \+ head/fixed shapes \+ head \+ fused GELU "
                         r"\d+\.\d+x, fixed shapes \+ head \+ fused GELU/\.\.\. \+ overlap \d+\.\d+x; codes identical; "
                         r"fixed shapes: 1 recording\(s\), \d+ replays, (\d) of \1 rows' codes "
                         r"identical to current's; fixed shapes \+ head: \d head recording\(s\), \d+ replays, \d of \1 rows' "
                         r"codes identical to fixed shapes'; fixed shapes \+ head \+ fused GELU: \d head recording\(s\), \d+ "
                         r"replays, \d of \1 rows' codes identical to fixed shapes \+ head'; \.\.\. \+ overlap: \d head "
                         r"recording\(s\), \d+ replays, \1 of \1 rows' codes identical to fixed shapes \+ head \+ fused GELU'$",
                         row), row
    launches = [line for line in out.splitlines() if "operations launched one by one" in line]
    inside = [line for line in out.splitlines() if "operations inside the recorded graphs" in line]
    assert len(launches) == len(inside) == 2, out
    for line, graphs in zip(launches, inside):
        found = re.search(r"reference (\d+), current (\d+), fixed shapes (\d+), fixed shapes \+ head (\d+), "
                          r"fixed shapes \+ head \+ fused GELU (\d+), \.\.\. \+ overlap (\d+)$", line)
        assert found, line
        reference, current, fixed, with_head, fused, overlap = map(int, found.groups())
        assert reference > current > fixed > with_head == fused >= overlap > 0, line  # fewer launched one by one
        found = re.search(r"fixed shapes (\d+), fixed shapes \+ head (\d+), fixed shapes \+ head \+ fused GELU (\d+), "
                          r"\.\.\. \+ overlap (\d+)$", graphs)
        assert found, graphs
        fixed, with_head, fused, overlapped = map(int, found.groups())
        assert overlapped == fused, graphs
        layers = bench.SMALL["layers"]  # the fused GELU takes seven operations out of each layer's recorded step
        assert with_head > fixed and fused == with_head - 7 * layers, graphs
    prefill = [line for line in out.splitlines() if line.startswith("prefill of")]
    assert len(prefill) == 1 and re.search(r"prefill of +3 requests: one by one \d+\.\d+ ms; together \d+\.\d+ ms; "
                                           r"ratio \d+\.\d+x; codes of the next 10 steps identical", prefill[0]), out
    # the fixed-shape prefill (CUDA graphs on a card): its buckets recorded in an untimed run, replayed in the timed one
    fixed = [line for line in out.splitlines() if line.startswith("prefill fixed shapes")]
    assert len(fixed) == 2, out
    for line, batch in zip(fixed, (1, 3)):
        assert re.search(rf"of +{batch} requests: one by one \d+\.\d+ ms \(eager/fixed shapes \d+\.\d+x\); together "
                         r"\d+\.\d+ ms \(\d+\.\d+x\); [1-9]\d* recording\(s\), [1-9]\d* replays; "
                         rf"(\d+) of {2 * batch} rows' next 10 codes identical", line), line


def test_the_serving_gpu_script_parses_and_names_only_flags_its_benchmarks_have(capsys, tmp_path):
    """benchmarks/serving_gpu.sh runs on a card only; here: bash reads it, it refuses a part whose results folder
    exists (before running anything), each part's time limits add up to at most 480 s (a part fits one 10-minute call
    with the wheels' set-up), and every flag it, or card_quick.sh's card branch, passes to a benchmark is one that
    benchmark's --help lists (a renamed flag would otherwise be found on the next device session)."""
    script = REPO_ROOT / "benchmarks" / "serving_gpu.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "07-engine-bf16-graphs.txt").write_text("earlier results")
    refused = subprocess.run(["bash", str(script), str(tmp_path), "all"], capture_output=True, text=True)
    assert refused.returncode == 2 and "b already exists" in refused.stderr and refused.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]
    assert (tmp_path / "b" / "07-engine-bf16-graphs.txt").read_text() == "earlier results"
    text = script.read_text(encoding="utf-8")
    parts = re.findall(r"^part_(\w)\(\) \{\n(.*?)^\}", text, re.M | re.S)
    assert [name for name, _ in parts] == ["a", "b", "c"]
    for name, body in parts:
        assert 0 < sum(int(limit) for limit in re.findall(r"^\s*step \S+ (\d+) ", body, re.M)) <= 480, name
    quick = (REPO_ROOT / "benchmarks" / "card_quick.sh").read_text(encoding="utf-8")
    card = re.search(r'^  ""\)\n(.*?);;', quick, re.M | re.S)
    assert card is not None
    commands = re.findall(r"python benchmarks/(\w+)\.py((?:[^\n]|\\\n)*)", text)
    for name, array in (("engine_load", "engine"), ("gpu_throughput", "train")):  # the card's arrays, then the command
        given = re.search(rf"{array}=\(([^)]*)\)", card.group(1))
        assert given is not None, array
        commands.append((name, given.group(1) + re.search(rf"{name}\.py(.*\n.*)", quick).group(1)))
    assert {name for name, _ in commands} == {"decode_step", "vocoder_windows", "engine_load", "reader_wakeups",
                                              "sampling_draw", "reader_host_work", "gpu_throughput"}
    for name, args in commands:
        with left_as_found(), pytest.raises(SystemExit):
            load_benchmark(name).main(["--help"])
        listed = set(re.findall(r"--[\w-]+", capsys.readouterr().out))
        used = set(re.findall(r"--[\w-]+", args))
        assert used and used <= listed, (name, used - listed)


def test_the_gpu_wheels_script_parses_refuses_an_existing_folder_and_finds_its_pins(tmp_path):
    """benchmarks/gpu_wheels.sh downloads (not here): bash reads it, it refuses a DIR that exists before fetching
    anything, and every package it asks for at this project's pin has a pin in requirements.txt (a renamed or
    removed pin would otherwise become an unpinned download on the next device session)."""
    script = REPO_ROOT / "benchmarks" / "gpu_wheels.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    (tmp_path / "old.whl").write_text("earlier wheels")
    refused = subprocess.run(["bash", str(script), str(tmp_path)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert refused.returncode == 2 and "already exists" in refused.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["old.whl"]
    copied = re.search(r"^cp (\S+) \"\$building/setup.sh\"", script.read_text(encoding="utf-8"), re.M)
    assert copied and (REPO_ROOT / copied.group(1)).is_file()  # the set-up it puts in DIR (tests/test_card_scripts.py)
    pinned = set(re.findall(r'"([\w-]+)==\$\(pin ([\w-]+)\)"', script.read_text(encoding="utf-8")))
    requirements = (REPO_ROOT / "requirements.txt").read_text(encoding="utf-8")
    assert {"coqui-tts", "transformers", "librosa"} <= {name for name, _ in pinned}
    for name, looked_up in pinned:
        assert name == looked_up and re.search(rf"^{re.escape(name)}==\S+$", requirements, re.M), name
