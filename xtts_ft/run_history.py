"""The run's history files and their one owner: ``metrics.jsonl``, ``events.jsonl``, ``samples/index.jsonl``.

Each file holds one JSON object per line, appended while the run goes, and has one record type here:

=========================  ===============  ==================================================================
file                       record           one line is
=========================  ===============  ==================================================================
``metrics.jsonl``          :class:`MetricsRow`  a training interval (``split`` "train") or an evaluation's losses
                                            (``split`` "eval"); the metric names are open-ended (``row["loss"]``)
``events.jsonl``           :class:`Event`       a resume, branch, checkpoint, stop, rollback, OOM skip, data change...
``samples/index.jsonl``    :class:`EvalRecord`  one evaluation: its metrics and the samples it synthesised
=========================  ===============  ==================================================================

Each file has one reader (``read_metrics`` / ``read_events`` / ``read_evaluations``: a line that is not a
complete record, such as the last line of a run killed while writing it, is skipped and counted, never fatal),
one appender (:class:`Appender`, opened by ``open_metrics`` / ``open_events`` / ``open_evaluations``; the
one-line helpers ``append_event`` and ``append_evaluation`` use it) and, where a run goes back to an earlier
step, one truncation (``truncate_metrics`` / ``truncate_evaluations``: the lines after that step go).
``events.jsonl`` is never truncated: it keeps the whole history, the resume that went back included.
Lines are strict JSON: a non-finite number is written as ``null``. Nothing else in the package opens these
files (tests/test_file_owners.py checks it).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Callable, Generic, Optional, TextIO, TypeVar

from xtts_ft.json_types import JsonObject, JsonValue
from xtts_ft.layout import INDEX_FILE, METRICS_FILE, SAMPLES_DIR, RunLayout
from xtts_ft.tempfiles import atomic_write


def _json_safe(value: object) -> object:
    """NaN/inf -> None, recursively, so every line stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _text(value: object) -> Optional[str]:
    return None if value is None else str(value)


def _step(value: object) -> Optional[int]:
    """A line's step: an int (a bool is no step); None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --- the records -------------------------------------------------------------------------------------------
class _ReadsAsItsLine(Mapping[str, JsonValue]):
    """A record that also reads as the JSON line it is written as, since its keys are open-ended
    (``row["loss"]``, ``event.get("signal")``, ``"lr" in row``)."""

    def to_json(self) -> JsonObject:
        raise NotImplementedError

    @cached_property
    def _line(self) -> dict[str, JsonValue]:
        return self.to_json()

    def __getitem__(self, key: str) -> JsonValue:
        return self._line[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._line)

    def __len__(self) -> int:
        return len(self._line)


@dataclass(frozen=True)
class MetricsRow(_ReadsAsItsLine):
    """One line of ``metrics.jsonl``: the mean losses, LR, grad norm... of a logged training interval, or
    (``split`` "eval") the losses and scores of an evaluation. Also a read-only mapping of the line as written,
    since the metric names are open-ended: ``row["loss"]``, ``row.get("eval_loss")``, ``"lr" in row``."""

    step: int  # optimizer steps done when the line was written
    fields: Mapping[str, JsonValue] = field(default_factory=dict)  # every other key of the line, in written order
    split: str = "train"  # "train" (the key is absent from such lines) or "eval"

    @property
    def is_eval(self) -> bool:
        return self.split == "eval"

    def number(self, key: str) -> Optional[float]:
        """The value of ``key`` when it is a number; None when absent, null (a non-finite value) or not a number."""
        value = self.fields.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def to_json(self) -> JsonObject:
        return {"step": self.step, **({} if self.split == "train" else {"split": self.split}), **self.fields}

    @classmethod
    def from_json(cls, obj: JsonObject) -> Optional[MetricsRow]:
        """The row of a line; None when it is no metrics row (no integer step)."""
        step = _step(obj.get("step"))
        if step is None:
            return None
        split = obj.get("split", "train")
        fields = {k: v for k, v in obj.items() if k not in ("step", "split")}
        return cls(step=step, fields=fields, split=split if isinstance(split, str) else str(split))


@dataclass(frozen=True)
class Event(_ReadsAsItsLine):
    """One line of ``events.jsonl``: something that happened to the run (``event``: "resume", "branch",
    "checkpoint", "stop", "rollback", "overfitting", "early_stop", "oom_skip", "data_changed"...) at ``step``,
    with the event's own fields. Also a read-only mapping of the line as written (``event.get("signal")``)."""

    event: str
    step: Optional[int]  # None for an event outside training steps (a data change found at the start)
    fields: Mapping[str, JsonValue] = field(default_factory=dict)  # the event's own keys
    time: Optional[float] = None  # seconds since the epoch (written last on the line)

    @classmethod
    def now(cls, event: str, step: Optional[int], fields: Mapping[str, JsonValue]) -> Event:
        """The event happening now (its ``time`` is the clock's)."""
        return cls(event=event, step=step, fields=dict(fields), time=time.time())

    def to_json(self) -> JsonObject:
        return {"step": self.step, "event": self.event, **self.fields,
                **({"time": self.time} if self.time is not None else {})}

    @classmethod
    def from_json(cls, obj: JsonObject) -> Optional[Event]:
        """The event of a line; None when it is none (no ``event`` name, or a step that is not an integer)."""
        name, step = obj.get("event"), obj.get("step")
        if not isinstance(name, str) or (step is not None and _step(step) is None):
            return None
        when = obj.get("time")
        fields = {k: v for k, v in obj.items() if k not in ("step", "event", "time")}
        return cls(event=name, step=_step(step), fields=fields,
                   time=float(when) if isinstance(when, (int, float)) and not isinstance(when, bool) else None)


@dataclass(frozen=True)
class EvalRecord:
    """One line of ``samples/index.jsonl``: an evaluation of ``step`` (evaluate/hook.py writes it). The sample
    lists hold each sample as SampleResult.to_json wrote it (paths relative to the run folder)."""

    step: int
    time: Optional[str] = None  # local time the evaluation ended, "YYYY-MM-DDTHH:MM:SS"
    dir: Optional[str] = None  # the samples' folder, relative to the run folder (samples/step_NNNNNN)
    samples: tuple[JsonObject, ...] = ()  # the test sentences in every reference voice
    mcd_samples: tuple[JsonObject, ...] = ()  # eval clips re-synthesised in their own voice (MCD)
    language_samples: Mapping[str, tuple[JsonObject, ...]] = field(default_factory=dict)  # per other language
    metrics: Mapping[str, Optional[float]] = field(default_factory=dict)  # the averaged scores (the hook's result)
    seconds_per_char_range: Optional[tuple[float, float]] = None  # the training data's range (None: not checked)
    eval_seconds: Optional[float] = None  # how long the evaluation took
    extra: Mapping[str, JsonValue] = field(default_factory=dict)  # keys this version does not know, kept as read

    def to_json(self) -> JsonObject:
        return {
            "step": self.step, "time": self.time, "dir": self.dir, "samples": list(self.samples),
            "mcd_samples": list(self.mcd_samples),
            "language_samples": {code: list(found) for code, found in self.language_samples.items()},
            "metrics": dict(self.metrics),
            "seconds_per_char_range": list(self.seconds_per_char_range) if self.seconds_per_char_range else None,
            "eval_seconds": self.eval_seconds, **self.extra,
        }

    @classmethod
    def from_json(cls, obj: JsonObject) -> Optional[EvalRecord]:
        """The record of a line (older lines may lack any key but ``step``); None without an integer step."""
        step = _step(obj.get("step"))
        if step is None:
            return None

        def samples(value: object) -> tuple[JsonObject, ...]:
            return tuple(s for s in value if isinstance(s, dict)) if isinstance(value, list) else ()

        languages = obj.get("language_samples")
        metrics = obj.get("metrics")
        spc = obj.get("seconds_per_char_range")
        seconds = obj.get("eval_seconds")
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        return cls(
            step=step, time=_text(obj.get("time")), dir=_text(obj.get("dir")), samples=samples(obj.get("samples")),
            mcd_samples=samples(obj.get("mcd_samples")),
            language_samples={str(k): samples(v) for k, v in languages.items()} if isinstance(languages, dict) else {},
            metrics=dict(metrics) if isinstance(metrics, dict) else {},
            seconds_per_char_range=(float(spc[0]), float(spc[1])) if isinstance(spc, list) and len(spc) == 2 else None,
            eval_seconds=float(seconds) if isinstance(seconds, (int, float)) else None,
            extra={k: v for k, v in obj.items() if k not in known},
        )


R = TypeVar("R", MetricsRow, Event, EvalRecord)
S = TypeVar("S", MetricsRow, EvalRecord)  # the records that always have a step


@dataclass(frozen=True)
class History(Generic[R]):
    """What a reader found in one file: its records in file order and the lines it skipped."""

    path: Path
    records: tuple[R, ...]
    skipped: tuple[int, ...] = ()  # 1-based numbers of non-empty lines that are no record (cut short, not JSON)

    def __iter__(self) -> Iterator[R]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)


# --- the one reader, appender and truncation of the line format --------------------------------------------
def _read(path: Path, parse: Callable[[JsonObject], Optional[R]]) -> History[R]:
    """The records of ``path`` (none when it is absent); a line that does not parse is skipped and counted."""
    path = Path(path)
    if not path.is_file():
        return History(path, ())
    records: list[R] = []
    skipped: list[int] = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        record = parse(obj) if isinstance(obj, dict) else None
        if record is None:
            skipped.append(number)
        else:
            records.append(record)
    return History(path, tuple(records), tuple(skipped))


class Appender(Generic[R]):
    """One history file open for appending (created when absent); each record is one line, flushed at once so
    a reader (the web app, the report) sees it and a kill loses at most the line being written."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: Optional[TextIO] = open(self.path, "a", encoding="utf-8")

    def append(self, record: R) -> None:
        if self._file is None:
            raise ValueError(f"{self.path} is closed")
        line = json.dumps(_json_safe(record.to_json()), ensure_ascii=False, allow_nan=False, default=str)
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Appender[R]:
        return self

    def __exit__(self, kind: Optional[type[BaseException]], error: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()


def _drop_lines_after(path: Path, step: int) -> int:
    """Keep the lines of ``path`` with an integer ``"step" <= step`` as they are (rewritten atomically); return
    how many went. A line cut short by a kill, or one that is not a JSON object with a step, goes too."""
    if not path.is_file():
        return 0
    kept: list[str] = []
    dropped = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line) if line.endswith("\n") else None
            except json.JSONDecodeError:
                record = None
            found = _step(record.get("step")) if isinstance(record, dict) else None
            if found is not None and found <= step:
                kept.append(line)
            else:
                dropped += 1
    if dropped:
        atomic_write(path, "".join(kept))
    return dropped


# --- per file ----------------------------------------------------------------------------------------------
def read_metrics(run_dir: Path) -> History[MetricsRow]:
    return _read(RunLayout(run_dir).metrics, MetricsRow.from_json)


def read_events(run_dir: Path) -> History[Event]:
    return _read(RunLayout(run_dir).events, Event.from_json)


def read_evaluations(run_dir: Path) -> History[EvalRecord]:
    return _read(RunLayout(run_dir).samples_index, EvalRecord.from_json)


def open_metrics(run_dir: Path) -> Appender[MetricsRow]:
    return Appender(RunLayout(run_dir).metrics)


def open_events(run_dir: Path) -> Appender[Event]:
    return Appender(RunLayout(run_dir).events)


def open_evaluations(run_dir: Path) -> Appender[EvalRecord]:
    return Appender(RunLayout(run_dir).samples_index)


def append_event(run_dir: Path, event: Event) -> None:
    """One event written outside the training loop (the run folder's checks, a stop before training)."""
    with open_events(run_dir) as events:
        events.append(event)


def append_evaluation(run_dir: Path, record: EvalRecord) -> None:
    with open_evaluations(run_dir) as index:
        index.append(record)


def truncate_metrics(run_dir: Path, step: int) -> int:
    """A run trains again from ``step``: the lines after it go (each step is then shown once); how many went."""
    return _drop_lines_after(RunLayout(run_dir).metrics, step)


def truncate_evaluations(run_dir: Path, step: int) -> int:
    """A run branches at ``step``: the evaluations after it go with their sample folders; how many went."""
    return _drop_lines_after(RunLayout(run_dir).samples_index, step)


def copy_history(run_dir: Path, folder: Path) -> None:
    """Copies of ``metrics.jsonl`` and ``samples/index.jsonl`` as they are now, at the same places in ``folder``
    (a branch folder keeps the history of the steps set aside)."""
    layout = RunLayout(run_dir)
    for source, target in ((layout.metrics, Path(folder) / METRICS_FILE),
                           (layout.samples_index, Path(folder) / SAMPLES_DIR / INDEX_FILE)):
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(target, source.read_bytes())


def metrics_version(run_dir: Path) -> tuple[str, int, int]:
    """What changes whenever ``metrics.jsonl`` is written (path, mtime, size): a cache of a drawing keys on it."""
    path = RunLayout(run_dir).metrics
    stat = path.stat() if path.is_file() else None
    return str(path.resolve()), stat.st_mtime_ns if stat else 0, stat.st_size if stat else 0


def latest_by_step(records: Iterable[S]) -> dict[int, S]:
    """step -> the last record of that step, by step (a resumed run writes some steps twice)."""
    by_step: dict[int, S] = {}
    for record in records:
        by_step[record.step] = record
    return {step: by_step[step] for step in sorted(by_step)}
