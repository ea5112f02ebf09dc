"""The Data tab's work without Gradio: check a dataset folder, the prepare / ingest commands, the report.

Preparing and ingesting run the project's own commands (``python -m xtts_ft prepare`` / ``ingest``)
as child processes, so the page shows their progress lines and their one-line errors exactly as a
terminal would. Both read the app's config (:func:`data_config`: its ``dataset.*``, ``ingest.*`` and
``asr.model``), as the run does. The output folder is checked by the page first, so that a refusal
names what the page offers, not the commands' flags. The report shown is the ``report.json`` /
``rejected.tsv`` those commands write.
"""

from __future__ import annotations

import csv
import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence, cast

from xtts_ft.config import DatasetConfig
from xtts_ft.config.schema import DatasetFormat
from xtts_ft.errors import ConfigError, UserError
from xtts_ft.layout import STAGE_REPORT, TRAIN_CSV, RunLayout
from xtts_ft.output_folder import REFUSE, OutputFolderError, check_output, inspect_folder

REJECTED_TSV = "rejected.tsv"
INGEST_REPORT = "ingest_report.json"  # written by ingest/output.py


def check_dataset(path: str, fmt: str) -> None:
    """The config loader's own dataset checks (the same one-line messages as a config file gets)."""
    problems: list[str] = []
    # the page's text goes in unchecked: check() is what names a format that is not one of DatasetFormat's
    DatasetConfig(path=path.strip(), format=cast(DatasetFormat, fmt)).check(problems)
    problems = [p for p in problems if p.startswith(("dataset.path", "dataset.format"))]
    if problems:
        raise ConfigError("\n".join(problems))


def data_config(launch_config: Optional[Path], run_dir: Path) -> Optional[Path]:
    """The config the Data tab's commands read: the one the app was started with (``ui --config``), else the
    run folder's own config.yaml, else None (the schema's defaults)."""
    if launch_config is not None:
        return Path(launch_config)
    own = RunLayout(Path(run_dir)).config
    return own if own.is_file() else None


def check_config(config: str, cwd: Path) -> Optional[str]:
    """The page's config box as a path for ``--config`` (None when empty); a missing file is a one-line error."""
    config = config.strip()
    if config and not (Path(cwd) / config).is_file():
        raise ConfigError(f"config: '{config}' not found; name a YAML file (configs/*.yaml, the run's config.yaml) "
                          f"or leave it empty for the schema's defaults")
    return config or None


def check_out(out: str, command: str, cwd: Path) -> None:
    """Refuse, in the page's words, an output folder that ``command`` (prepare / ingest) would refuse.

    The same check as the command's own (:func:`xtts_ft.output_folder.check_output`); the page never moves
    a folder aside or adds to one, so its only way out is another folder.
    """
    if not out.strip():
        raise UserError("prepared output folder: empty; name a folder for the clips")
    folder = Path(cwd) / out.strip()
    try:
        check_output(folder, command, REFUSE, replace_own=command != "ingest")
    except OutputFolderError:
        what = inspect_folder(folder, command).what
        held = "is a file" if what == "a file" else f"holds {what}"
        raise UserError(f"prepared output folder '{out.strip()}': {held}; {command} here never writes over, moves "
                        f"or adds to it: name another prepared output folder (a new one is made)") from None


def prepare_command(path: str, out: str, fmt: str, config: Optional[str] = None) -> list[str]:
    cmd = [sys.executable, "-m", "xtts_ft", "prepare", "--input", path.strip(), "--out", out.strip(), "--format", fmt]
    return cmd + ["--config", config] if config else cmd


def ingest_command(audio: Sequence[str], out: str, text: Optional[str], subtitles: Optional[str],
                   config: Optional[str] = None) -> list[str]:
    cmd = [sys.executable, "-m", "xtts_ft", "ingest", *audio, "--out", out.strip()]
    if config:
        cmd += ["--config", config]
    if text:
        cmd += ["--text", text]
    if subtitles:
        cmd += ["--subtitles", subtitles]
    return cmd


def stream_command(command: list[str], cwd: Path) -> Iterator[tuple[str, Optional[int]]]:
    """(output so far, exit code or None while running) as the command prints."""
    lines: list[str] = []
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            encoding="utf-8", errors="replace", bufsize=1)
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\r\n"))
        yield "\n".join(lines[-40:]), None
    yield "\n".join(lines[-40:]), proc.wait()


def report_markdown(folder: Path) -> str:
    """The dataset report of a prepared (or ingested) folder: kept, rejected by reason, per speaker, durations."""
    folder = Path(folder)
    path = folder / STAGE_REPORT
    if not path.is_file():
        path = folder / INGEST_REPORT
    if not path.is_file():
        return f"No report in `{folder}` yet: prepare a dataset."
    try:
        r = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return f"`{path}` is not readable JSON; prepare the dataset again."
    lines = [f"**{r.get('kept', 0)} clips kept** ({r.get('kept_train', '-')} train, {r.get('kept_eval', '-')} eval), "
             f"{r.get('hours', 0)} h; {r.get('rejected_total', 0)} rejected; source `{r.get('dataset', '')}`", ""]
    rejected = {k: v for k, v in (r.get("rejected") or {}).items() if v}
    if rejected:
        lines += ["| rejected because | clips |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rejected.items()] + [""]
    detail = r.get("speaker_detail") or {}
    if detail:
        lines += ["| speaker | kept | train | eval | hours |", "|---|---|---|---|---|"]
        lines += [f"| {s} | {d.get('kept')} | {d.get('train')} | {d.get('eval')} | {d.get('hours')} |"
                  for s, d in detail.items()] + [""]
    stats = r.get("duration_stats") or {}
    if stats:
        lines.append("durations (s): " + ", ".join(f"{k} {stats[k]}" for k in ("min", "median", "mean", "max") if k in stats))
    return "\n".join(lines)


def random_kept_clip(folder: Path, seed: Optional[int] = None) -> Optional[tuple[Path, str]]:
    """(audio, transcript) of a random kept training clip of a prepared folder."""
    csv_path = Path(folder) / TRAIN_CSV
    if not csv_path.is_file():
        return None
    with open(csv_path, encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="|") if r.get("audio_file")]
    if not rows:
        return None
    row = random.Random(seed).choice(rows)
    return Path(folder) / row["audio_file"], row.get("text", "")


def rejected_clips(folder: Path) -> list[dict[str, str]]:
    """Every rejected clip of a prepared folder: clip_id, reason, where, detail (rejected.tsv)."""
    path = Path(folder) / REJECTED_TSV
    if not path.is_file():
        return []
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def rejected_audio(folder: Path, row: Mapping[str, str]) -> Optional[Path]:
    """The source audio of a rejected clip, when it can still be found (relative to the dataset root)."""
    try:
        root = Path(json.loads((Path(folder) / STAGE_REPORT).read_text(encoding="utf-8")).get("dataset", ""))
    except (OSError, json.JSONDecodeError):
        return None
    for candidate in (row.get("where", ""), row.get("clip_id", "")):
        path = (root / candidate.split(":")[0]) if candidate else None
        if path is not None and path.is_file():
            return path
    return None
