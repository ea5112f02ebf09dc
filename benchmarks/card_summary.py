"""The figures of ``benchmarks/card_quick.sh``, one line each (``name value unit``), from the rows its steps wrote.

    python benchmarks/card_summary.py OUT    # reads OUT/engine.json and OUT/train.json; prints, and writes OUT/summary.txt

- ``first_audio_p50_1``: a caller alone, time to its first audio (ms, median; one caller: its own time);
- ``first_audio_p95_32``: 32 callers at once, time to first audio (ms, 95th percentile);
- ``x_realtime_32``: 32 callers at once, seconds of audio made per second of wall time, all callers together;
- ``train_peak_share``: the best training row's model FLOP/s against the card's dense bf16 peak (%).

A figure whose row is missing (its step failed or ran out of time) or has no meaning there (a CPU has no
tensor-core peak) is ``n/a``; a note above the lines says why, and what the rows ran with.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

ENGINE, TRAIN, SUMMARY = "engine.json", "train.json", "summary.txt"  # in OUT
CALLERS = 32  # the many-callers row the figures are read from


def _read(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def figures(out: Path) -> tuple[list[str], list[str]]:
    """(notes, summary lines) from OUT's files."""
    notes: list[str] = []
    rows = _read(out / ENGINE) or []
    by_callers = {row["clients"]: row for row in rows}
    for n in (1, CALLERS):
        row = by_callers.get(n)
        if row is None:
            notes.append(f"no engine row for {n} caller(s) in {ENGINE} (its step failed or ran out of time)")
        else:
            notes.append(f"engine x{n}: {row['path']} on {row['device']}, {row.get('engine_precision')}; graphs: "
                         f"{row.get('graphs') or 'none'}; {row.get('warmup_rounds')} untimed round(s) first")
    alone, many = by_callers.get(1), by_callers.get(CALLERS)
    train = _read(out / TRAIN) or {}
    trained = [row for row in train.get("rows", []) if row.get("tflops")]
    peak = train.get("peak_tflops")
    share: Optional[float] = None
    if not trained:
        notes.append(f"no training row in {TRAIN} (its step failed, ran out of time or every batch ran out of memory)")
    elif not peak:
        notes.append(f"training on {train.get('device')}: no tensor-core peak known there, so no share of it")
    else:
        best = max(trained, key=lambda row: row["tflops"])
        share = 100.0 * best["tflops"] / peak
        notes.append(f"training: {best['path']} {best['precision']} batch {best['batch']} on {train.get('device')}, "
                     f"{best['tflops']:.1f} TFLOP/s of {peak:g}, peak memory {best['peak_mem_gib']:.1f} GiB")
    lines = [_line("first_audio_p50_1", alone and 1000 * alone["ttfa_p50"], "ms", 0),
             _line(f"first_audio_p95_{CALLERS}", many and 1000 * many["ttfa_p95"], "ms", 0),
             _line(f"x_realtime_{CALLERS}", many and many["audio_per_s"], "x", 1),
             _line("train_peak_share", share, "%", 1)]
    return notes, lines


def _line(name: str, value: Optional[float], unit: str, decimals: int) -> str:
    known = value is not None and value == value  # NaN: a caller had no audio
    return f"{name} {f'{value:.{decimals}f}' if known else 'n/a'} {unit}"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python benchmarks/card_summary.py OUT")
    out = Path(args[0])
    notes, lines = figures(out)
    for note in notes:
        print(f"# {note}", flush=True)
    (out / SUMMARY).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    for line in lines:
        print(line, flush=True)


if __name__ == "__main__":
    main()
