"""``prepare --config RUN.yaml``: the run config's dataset.* settings and text.fold_homophones apply (what the
web app's Data tab passes, issue 31 item 3); ``--set`` needs ``--config``."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.data.datahelpers import read_tsv
from xtts_ft.cli import main
from xtts_ft.data import read_metadata

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "datasets" / "amharic_demo"


def _subset(tmp_path: Path, n: int = 4) -> Path:
    root = tmp_path / "ds"
    (root / "wavs").mkdir(parents=True)
    lines = (DEMO / "metadata.csv").read_text(encoding="utf-8").splitlines()[: n + 1]
    for line in lines[1:]:
        shutil.copyfile(DEMO / line.split("|")[0], root / line.split("|")[0])
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_prepare_reads_the_configs_dataset_and_text_settings(tmp_path: Path, capsys):
    root = _subset(tmp_path)
    config = tmp_path / "run.yaml"
    config.write_text("dataset:\n  path: somewhere/else\n  format: ljspeech\n  num_workers: 1\n  eval_fraction: 0.0\n"
                      "  max_text_chars: 25\ntext:\n  fold_homophones: false\n", encoding="utf-8")
    code = main(["prepare", "--input", str(root), "--out", str(tmp_path / "out"), "--format", "coqui",
                 "--config", str(config)])
    assert code == 0, capsys.readouterr().err
    rejected = {r["clip_id"]: r["reason"] for r in read_tsv(tmp_path / "out" / "rejected.tsv")}
    assert rejected == {"wavs/spk3_001.flac": "text_too_long"}  # 27 characters: the config's limit (25), not 250
    texts = [r["text"] for r in read_metadata(tmp_path / "out" / "metadata_train.csv")]
    assert any("ሥራ" in t for t in texts)  # the config's fold_homophones: false left ሥ as written

    # a flag given on the command line wins over the config; --set overrides the config
    code = main(["prepare", "--input", str(root), "--out", str(tmp_path / "out2"), "--format", "coqui",
                 "--config", str(config), "--set", "dataset.max_text_chars=250", "--fold-homophones"])
    assert code == 0, capsys.readouterr().err
    texts = [r["text"] for r in read_metadata(tmp_path / "out2" / "metadata_train.csv")]
    assert len(texts) == 4 and any("ስራ" in t for t in texts) and not any("ሥ" in t for t in texts)


def test_set_without_config_is_a_one_line_error(tmp_path: Path, capsys):
    code = main(["prepare", "--input", str(DEMO), "--out", str(tmp_path / "out"), "--set", "dataset.eval_fraction=0.5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["error: --set: only used with --config; name the config whose values it overrides"]
    assert not (tmp_path / "out").exists()
