"""``python -m xtts_ft serve``: options that cannot work are one ``error:`` line before any model is loaded."""

from __future__ import annotations

import pytest

from tests.serve.servehelpers import free_port
from xtts_ft.cli import main
from xtts_ft.config import ServeConfig
from xtts_ft.serve.command import ServeOptions, open_engine


@pytest.mark.parametrize("extra, words", [
    (["--wyoming", "udp://0.0.0.0:10200"], "--wyoming udp://0.0.0.0:10200: give tcp://HOST:PORT"),
    (["--port", "70000"], "--port 70000: must be 1-65535"),
    (["--max-codes", "0"], "--max-codes 0: must be 1 or more"),
    (["--max-active-streams", "0"], "--max-active-streams 0: must be 1 or more"),
    (["--stream-first-chunk-codes", "0"], "--stream-first-chunk-codes 0: must be 1 or more"),
    (["--stream-chunk-codes", "-3"], "--stream-chunk-codes -3: must be 1 or more"),
    (["--vocoder-batch", "0"], "--vocoder-batch 0: must be 1 or more"),
])
def test_bad_options_are_one_line(tiny_export, capsys, extra, words):
    assert main(["serve", "--model", str(tiny_export), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {err[0][7:]}"] and words in err[0]


def test_a_folder_that_is_no_model_is_named(tmp_path, capsys):
    assert main(["serve", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--model {tmp_path}: expected an export folder" in err and "Traceback" not in err


def test_streaming_options_reach_the_engine_with_the_schema_defaults(tiny_export, monkeypatch):
    seen: list[ServeOptions] = []
    monkeypatch.setattr("xtts_ft.commands.apps.serve_command", lambda opts: seen.append(opts) or 0)
    assert main(["serve", "--model", str(tiny_export)]) == 0
    defaults = seen[-1].settings()
    assert (defaults.max_active_streams, defaults.stream_first_chunk_codes, defaults.stream_chunk_codes) == (
        ServeConfig.max_active_streams, ServeConfig.stream_first_chunk_codes, ServeConfig.stream_chunk_codes)
    assert (defaults.decode_precision, defaults.vocoder_precision, defaults.decode_graphs) == ("fp32", "fp32", "auto")
    assert defaults.warm_up == ServeConfig.warm_up == "auto" and defaults.vocoder_stream == "auto"
    assert defaults.decode_overlap == ServeConfig.decode_overlap == "auto"
    assert main(["serve", "--model", str(tiny_export), "--max-active-streams", "3",
                 "--stream-first-chunk-codes", "6", "--stream-chunk-codes", "25", "--decode-precision", "bf16",
                 "--vocoder-precision", "fp16", "--decode-graphs", "on", "--vocoder-batch", "4", "--warm-up", "off",
                 "--vocoder-stream", "off", "--decode-overlap", "off"]) == 0
    assert seen[-1].settings().warm_up == "off" and seen[-1].settings().vocoder_stream == "off"
    assert seen[-1].settings().decode_overlap == "off"
    engine = open_engine(seen[-1])
    try:
        assert engine.loop.max_active == 3
        assert (engine.settings.stream_first_chunk_codes, engine.settings.stream_chunk_codes) == (6, 25)
        assert engine.settings.queue_size == ServeConfig.queue_size  # what has no flag keeps the schema's default
        # half precision was asked for, but this is a CPU: both stay fp32, and the engine says why
        assert (engine.settings.decode_precision, engine.settings.vocoder_precision) == ("bf16", "fp16")
        assert engine.settings.decode_graphs == "on" and engine.settings.vocoder_batch == 4
        assert engine.vocoder_turns.max_batch == 1  # a CPU vocodes one chunk per call (batching measured slower)
        assert engine.decoding.decode is None and engine.decoding.vocoder is None and not engine.decoding.graphs
        assert engine.loop.settings is engine.decoding and len(engine.decoding.notes) == 3
        assert engine.loop.fixed_step is None and engine.vocoder_stream is None  # (a CPU has none either way)
        assert not engine.loop.settings.overlap  # (nor overlapped steps)
    finally:
        engine.close()


def test_an_unknown_precision_is_refused_by_the_parser(tiny_export, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--model", str(tiny_export), "--vocoder-precision", "fp8"])
    assert exc.value.code == 2 and "invalid choice: 'fp8'" in capsys.readouterr().err


@pytest.mark.parametrize("setting, warms", [("on", True), ("auto", False)])
def test_serve_warms_the_engine_up_before_it_listens_on_cuda_or_when_asked(tiny_export, voices_dir, monkeypatch,
                                                                              capsys, setting, warms):
    """--warm-up on runs the rounds before the address is printed (here on the CPU, with a small batch limit); auto
    does not on a CPU. The server itself is stood in for: it records what the engine had done when it started."""
    from xtts_ft.serve import command

    seen = {}

    async def serving(engine, opts, generations=None, sockets=None):
        seen["decoded"], seen["pieces"] = engine.loop.steps > 0, engine.stats.pieces
        return command.StopReport()

    monkeypatch.setattr(command, "serve_forever", serving)
    args = ["serve", "--model", str(tiny_export), "--voices", str(voices_dir), "--device", "cpu", "--max-codes", "4",
            "--max-active-streams", "2", "--warm-up", setting, "--port", str(free_port())]
    assert main(args) == 0  # (its logging setup replaces the handlers: its console lines are read from stderr)
    warm_lines = [line for line in capsys.readouterr().err.splitlines() if "warm-up" in line]
    if warms:
        assert seen == {"decoded": True, "pieces": 0}  # the rounds ran; their pieces are not counted
        assert len(warm_lines) == 1 and "INFO    warm-up: 2 rounds of 1, 2 callers in " in warm_lines[0]
    else:
        assert seen == {"decoded": False, "pieces": 0} and warm_lines == []


@pytest.mark.parametrize("option", ["--port", "--wyoming"])
def test_a_port_in_use_is_one_line_before_the_model_loads(tiny_export, monkeypatch, capsys, option):
    """serve on a port another server holds: one ``error:`` line at once. Before, the model loaded first (7 s with
    XTTS-v2), then uvicorn printed ``[Errno 98]``, "Task exception was never retrieved" and a SystemExit traceback."""
    import socket
    import time

    from xtts_ft.serve import command

    def no_load(*_args, **_kwargs):
        raise AssertionError("the model was loaded before the port was checked")

    monkeypatch.setattr(command.SpeechEngine, "open", no_load)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["--port", str(port)] if option == "--port" else ["--wyoming", f"tcp://127.0.0.1:{port}"]
        start = time.monotonic()
        code = main(["serve", "--model", str(tiny_export), "--host", "127.0.0.1", *args])
        took = time.monotonic() - start
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {option} ") and f"127.0.0.1:{port} is in use" in err[0], err
    assert took < 5, took
