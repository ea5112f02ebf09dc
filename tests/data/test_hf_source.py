"""The hf layout: parquet with audio bytes (no torchcodec), every row kept or rejected, Hub ids offline."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from tests.data.datahelpers import SENTENCES, make_cfg, read_tsv, standin_normalize, tone
from tests.fixtures.hub import StandInHub, serve_hub
from xtts_ft.data.prepare import prepare_dataset
from xtts_ft.errors import DataError


def _flac_bytes(seconds: float, freq: float) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, tone(seconds, freq=freq), 22050, format="FLAC")
    return buf.getvalue()


def write_parquet(path: Path) -> Path:
    """6 rows as the Hub's parquet files hold them (Audio struct of bytes + path, the features in the schema
    metadata; written with pyarrow: datasets needs torchcodec to encode audio): 3 good, bad bytes, empty text,
    and a row with no audio at all."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    audio = [{"bytes": _flac_bytes(2.0 + 0.4 * i, 200 + 50 * i), "path": f"clip_{i}.flac"} for i in range(3)]
    audio.append({"bytes": b"this is not audio at all", "path": "broken.flac"})
    audio.append({"bytes": _flac_bytes(2.0, 600), "path": "silent_text.flac"})
    audio.append({"bytes": None, "path": None})
    texts = [*SENTENCES[:3], SENTENCES[3], "", SENTENCES[4]]
    speakers = ["reader_a", "reader_b", "reader_a", "reader_b", "reader_a", "reader_b"]
    features = {"audio": {"_type": "Audio"}, "transcription": {"dtype": "string", "_type": "Value"},
                "who": {"dtype": "string", "_type": "Value"}}
    schema = pa.schema([("audio", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("transcription", pa.string()), ("who", pa.string())],
                       metadata={"huggingface": json.dumps({"info": {"features": features}})})
    table = pa.table({"audio": audio, "transcription": texts, "who": speakers}, schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def test_parquet_with_audio_bytes_goes_through_prepare(tmp_path: Path):
    parquet = write_parquet(tmp_path / "src" / "train-00000.parquet")
    out = tmp_path / "out"
    cfg = make_cfg(parquet, format="hf", text_column="transcription", speaker_column="who",
                   hf_cache_dir=str(tmp_path / "hf_cache"))
    report = prepare_dataset(cfg, out, normalizer=standin_normalize, progress=False)
    assert report.layout == "hf" and report.total == 6 and report.kept == 3
    assert report.rejected["unreadable"] == 1 and report.rejected["empty_text"] == 1
    assert report.rejected["missing_file"] == 1
    assert report.speakers == {"reader_a": 2, "reader_b": 1}
    rejected = {r["reason"]: r for r in read_tsv(out / "rejected.tsv")}
    assert rejected["unreadable"]["where"] == "row 3 (broken.flac)"
    assert rejected["missing_file"]["clip_id"] == "train/0000005"
    wavs = sorted(p.name for p in (out / "wavs").iterdir())
    assert len(wavs) == 3
    info = sf.info(str(out / "wavs" / wavs[0]))
    assert info.samplerate == 22050 and info.frames > 22050  # decoded and resampled by the project's audio stage

    again = prepare_dataset(cfg, out, normalizer=standin_normalize, progress=False)
    assert again.kept == 3 and again.processed == 0  # extracted bytes unchanged: every clip from the cache


def test_folder_of_parquet_files_and_missing_column(tmp_path: Path):
    write_parquet(tmp_path / "src" / "data" / "train-00000.parquet")
    cfg = make_cfg(tmp_path / "src", format="hf", text_column="sentence", hf_cache_dir=str(tmp_path / "c"))
    with pytest.raises(DataError, match="no column sentence .*transcription.*set dataset.audio_column"):
        prepare_dataset(cfg, tmp_path / "out", normalizer=standin_normalize, progress=False)


def test_hub_id_offline_says_what_to_do(tmp_path: Path, monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    cfg = make_cfg(tmp_path, format="hf", hf_cache_dir=str(tmp_path / "empty_cache"))
    cfg = dataclasses.replace(cfg, path="someone/amharic-speech")
    with pytest.raises(DataError) as err:
        prepare_dataset(cfg, tmp_path / "out", normalizer=standin_normalize, progress=False)
    message = str(err.value)
    assert "\n" not in message
    assert "'someone/amharic-speech'" in message and "hf download --repo-type dataset someone/amharic-speech" in message
    assert "HF_HUB_OFFLINE" in message


def test_rows_naming_audio_files_next_to_the_parquet(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "src"
    (folder / "audio").mkdir(parents=True)
    for i in range(2):
        (folder / "audio" / f"c{i}.flac").write_bytes(_flac_bytes(2.0 + i, 250 + 60 * i))
    table = pa.table({"file": ["audio/c0.flac", "audio/c1.flac", "audio/gone.flac"], "text": SENTENCES[:3]})
    pq.write_table(table, folder / "rows.parquet")
    cfg = make_cfg(folder / "rows.parquet", format="hf", audio_column="file", hf_cache_dir=str(tmp_path / "c"))
    report = prepare_dataset(cfg, tmp_path / "out", normalizer=standin_normalize, progress=False)
    assert report.kept == 2 and report.rejected["missing_file"] == 1
    assert {r["where"] for r in read_tsv(tmp_path / "out" / "rejected.tsv")} == {"row 2 (audio/gone.flac)"}


# --- a Hub dataset id, served by a local stand-in for the Hub (no network) ---------------------------

HUB_SCRIPT = """
import json, sys
from pathlib import Path
import datasets.config, huggingface_hub.constants
from xtts_ft.data.prepare import prepare_dataset
from xtts_ft.config import DatasetConfig
cfg = DatasetConfig(path="someone/amharic", format="hf", text_column="transcription", speaker_column="who",
                    num_workers=1, eval_fraction=0.0)
out = Path(sys.argv[1])
normalizer = lambda text: " ".join(text.split())  # a stand-in normaliser: only the sources are compared
first = prepare_dataset(cfg, out / "online", normalizer=normalizer, progress=False)
huggingface_hub.constants.HF_HUB_OFFLINE = datasets.config.HF_HUB_OFFLINE = True  # the second run: cache only
second = prepare_dataset(cfg, out / "offline", normalizer=normalizer, progress=False)
print(json.dumps([first.to_dict(), second.to_dict()]))
"""


def test_hub_id_downloads_once_then_prepares_offline_from_the_cache(tmp_path: Path):
    repo = tmp_path / "repo"
    write_parquet(repo / "data" / "train-00000.parquet")
    (repo / "README.md").write_text("---\nlicense: cc0-1.0\n---\n", encoding="utf-8")
    with serve_hub({}, datasets={"someone/amharic": repo}) as url:
        env = {**os.environ, "HF_ENDPOINT": url, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_DISABLE_TELEMETRY": "1"}
        done = subprocess.run([sys.executable, "-c", HUB_SCRIPT, str(tmp_path / "out")], env=env,
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    online, offline = json.loads(done.stdout.strip().splitlines()[-1])
    for report in (online, offline):
        assert report["layout"] == "hf" and report["total"] == 6 and report["kept"] == 3
        assert report["rejected"]["unreadable"] == 1 and report["rejected"]["missing_file"] == 1
        assert report["dataset"] == "hf:someone/amharic:train"
    parquet_gets = [r for r in StandInHub.requests if r.startswith("GET") and r.endswith("train-00000.parquet")]
    assert len(parquet_gets) == 1  # downloaded once; the offline run read the cache


def test_a_downloaded_repo_folder_reads_the_named_split(tmp_path: Path):
    parquet = write_parquet(tmp_path / "one.parquet")
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    shutil.copy(parquet, repo / "data" / "train-00000-of-00001.parquet")
    import pyarrow.parquet as pq

    pq.write_table(pq.read_table(parquet).slice(0, 2), repo / "data" / "test-00000-of-00001.parquet")
    cfg = make_cfg(repo, format="hf", hf_split="test", text_column="transcription", hf_cache_dir=str(tmp_path / "c"))
    report = prepare_dataset(cfg, tmp_path / "out", normalizer=standin_normalize, progress=False)
    assert report.total == 2 and report.kept == 2  # the test split only, not every parquet file in the folder
    cfg = dataclasses.replace(cfg, hf_split="validation")
    with pytest.raises(DataError, match=r"Unknown split \"validation\". Should be one of .*set dataset.hf_split"):
        prepare_dataset(cfg, tmp_path / "out2", normalizer=standin_normalize, progress=False)


def test_a_save_to_disk_folder(tmp_path: Path):
    import datasets

    rows = {"audio": [{"bytes": _flac_bytes(2.5, 300), "path": "a.flac"}, {"bytes": b"", "path": "b.flac"}],
            "text": SENTENCES[:2]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "saved"))
    report = prepare_dataset(make_cfg(tmp_path / "saved", format="hf"), tmp_path / "out",
                             normalizer=standin_normalize, progress=False)
    assert report.kept == 1 and report.rejected["missing_file"] == 1  # empty bytes and no such file
    with pytest.raises(DataError, match="'dev' is not a split of .* \\(it has train\\)"):
        prepare_dataset(make_cfg(tmp_path / "saved", format="hf", hf_split="dev"), tmp_path / "out2",
                        normalizer=standin_normalize, progress=False)
