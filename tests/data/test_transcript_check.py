"""dataset.transcript_check: clips whose audio does not say their transcript are rejected.

Uses the small committed recogniser on demo clips (it was never trained on the demo sentences).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from xtts_ft.asr import SMALL_MODEL_DIR
from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.data import prepare_dataset
from xtts_ft.errors import ConfigError
from xtts_ft.text_settings import make_normalizer

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "datasets" / "amharic_demo"
FOLDING = make_normalizer(fold_homophones=True)  # the recogniser's scoring folds too


class CountingRecognizer:
    """The real recogniser, counting the clips it is asked to transcribe."""

    def __init__(self, inner: Recognizer) -> None:
        self.inner, self.folder, self.heard = inner, inner.folder, 0

    def transcribe_files(self, paths):
        self.heard += len(paths)
        return self.inner.transcribe_files(paths)


@pytest.fixture(scope="module")
def recognizer():
    return Recognizer(SMALL_MODEL_DIR, device="cpu", batch_size=8)


def _swapped_dataset(root: Path, n: int = 10) -> set[str]:
    """n demo clips; the transcripts of two pairs of similar length swapped. Returns the swapped clip ids."""
    rows = list(csv.reader((DEMO / "metadata.csv").open(encoding="utf-8"), delimiter="|"))[1 : n + 1]
    (root / "wavs").mkdir(parents=True)
    for audio, _, _ in rows:
        shutil.copy(DEMO / audio, root / audio)
    by_len = sorted(range(len(rows)), key=lambda i: len(rows[i][1]))
    swapped = set()
    for a, b in ((by_len[2], by_len[3]), (by_len[6], by_len[7])):  # similar lengths: chars/s stays plausible
        rows[a][1], rows[b][1] = rows[b][1], rows[a][1]
        swapped |= {rows[a][0], rows[b][0]}
    with (root / "metadata.csv").open("w", encoding="utf-8") as f:
        f.write("audio_file|text|speaker_name\n")
        f.writelines("|".join(r) + "\n" for r in rows)
    return swapped


def test_swapped_transcripts_are_exactly_the_rejected_clips(tmp_path, recognizer):
    from xtts_ft.config import DatasetConfig

    swapped = _swapped_dataset(tmp_path / "data")
    cfg = DatasetConfig(path=str(tmp_path / "data"), format="coqui", num_workers=1, eval_fraction=0.0,
                        transcript_check=0.5)
    counting = CountingRecognizer(recognizer)
    out = tmp_path / "out"
    report = prepare_dataset(cfg, out, normalizer=FOLDING, progress=False, recognizer=counting)

    assert report.rejected["transcript_mismatch"] == 4
    lines = (out / "rejected.tsv").read_text(encoding="utf-8").splitlines()[1:]
    rejected = {line.split("\t")[2]: line for line in lines if "\ttranscript_mismatch\t" in line}
    assert {w.split(":")[0] for w in rejected} == {"metadata.csv"}
    assert len(lines) == 4 and all("heard: " in line for line in lines)
    kept = (out / "metadata_train.csv").read_text(encoding="utf-8")
    assert not any(Path(s).stem in kept for s in swapped)  # none of the swapped clips was kept
    assert report.kept == 6
    stats = json.loads((out / "report.json").read_text(encoding="utf-8"))["transcript_cer_stats"]
    assert stats["count"] == 10 and stats["max"] > 0.5 and stats["min"] < 0.5
    assert counting.heard == 10

    # A re-run reads the recognised text from the cache: nothing is transcribed again.
    again = CountingRecognizer(recognizer)
    report2 = prepare_dataset(cfg, out, normalizer=FOLDING, progress=False, recognizer=again)
    assert again.heard == 0 and report2.rejected["transcript_mismatch"] == 4


def test_transcript_check_without_a_recogniser_is_a_config_error(tmp_path):
    from xtts_ft.config import DatasetConfig

    _swapped_dataset(tmp_path / "data")
    cfg = DatasetConfig(path=str(tmp_path / "data"), format="coqui", num_workers=1, eval_fraction=0.0,
                        transcript_check=0.5)
    with pytest.raises(ConfigError, match="transcript_check"):
        prepare_dataset(cfg, tmp_path / "out", normalizer=FOLDING, progress=False)
