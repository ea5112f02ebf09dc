"""Bad input sweep: every mistake below ends in the exact lines a user sees, never in a raw traceback.

Each row is a command line (``headless_train.py ...`` or ``python -m xtts_ft ...``) given one bad
input across config, dataset, tokenizer, checkpoints and base model, with the exit code and the
complete list of ``error:`` lines expected on stderr. All rows run in one Python process
(scripts/cli_batch.py calls the same entry functions the two command lines call, so one torch
import serves them all); two rows are also run as real separate processes to show the batch sees
what a terminal sees. Paths in the expected lines are filled in from the test's workspace.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.fixtures.scripts import CLI_BATCH, script_command, script_env
from tests.reliability.relhelpers import REPO
from xtts_ft.checkpoint_store import CheckpointStore, file_sha256
from xtts_ft.config import config_from_dict
from xtts_ft.layout import META_FILE, STATE_FILE
from xtts_ft.run_folder import RunRecord, read_record, run_fingerprint, write_record
from xtts_ft.tokenizer.fingerprint import vocab_fingerprint

pytestmark = pytest.mark.slow  # one process runs the whole sweep of bad inputs

DEMO = REPO / "datasets" / "amharic_demo"
NO_CODE = ("files are read as plain weights only, so nothing in it was run. Use the official file, or re-save the "
           "weights as a plain state dict")
FIX_VOCAB = ("start a new run dir (run.output_dir), or set checkpoint.resume: never and add --archive-old-run (the old "
             "checkpoints are moved into old_runs/, not deleted)")
OWNED, OWNED_SAME = "20260101-000000-aaaaaa", "20260101-000000-bbbbbb"  # run ids of two folders made by the fixture
DUPLICATE_KEY_YAML = """run: {output_dir: '{ws}/run', device: cpu}
base_model: {source: '{base}'}
dataset: {path: '{ws}/data', format: coqui}
training: {max_steps: 2, warmup_steps: 1}
precision: {mode: fp32}
training: {lr: 0.001}
"""


def wav_bytes(seconds: float) -> bytes:
    import io

    import numpy as np
    import soundfile as sf

    buf = io.BytesIO()
    t = np.arange(int(seconds * 22050)) / 22050
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 22050, format="WAV", subtype="PCM_16")
    return buf.getvalue()


GOOD = {
    "run": {"output_dir": "{ws}/run", "device": "cpu"},
    "base_model": {"source": "{base}"},
    "dataset": {"path": "{ws}/data", "format": "coqui", "eval_fraction": 0.25, "num_workers": 1},
    "tokenizer": {"new_tokens": 600},
    "training": {"max_steps": 2, "batch_size": 2, "num_workers": 0, "warmup_steps": 1,
                 "min_conditioning_s": 0.5, "max_conditioning_s": 1.5},
    "precision": {"mode": "fp32"},
    "evaluation": {"every_steps": 0, "eval_at_start": False, "sentences": ["ሰላም"], "max_new_tokens": 4,
                   "mcd_clips": 0, "max_speakers": 1, "quality": False},
}


def config(**changes) -> dict:
    """GOOD with ``section={key: value}`` changes; a value of None removes the key, a non-dict replaces the section."""
    cfg = copy.deepcopy(GOOD)
    for section, values in changes.items():
        if not isinstance(values, dict):
            cfg[section] = values
            continue
        for key, value in values.items():
            if value is None:
                cfg.setdefault(section, {}).pop(key, None)
            else:
                cfg.setdefault(section, {})[key] = value
    return cfg


# Where a line quotes a third-party decoder (torchaudio through ffmpeg, or soundfile, depending on what is
# installed), its text differs between machines: only the project's own part of the line is compared.
DECODER = "<decoder's own message>"

# (id, command, argv, files to write first {relative path: YAML dict | text | bytes}, exit code, expected error lines)
H, X = "headless", "xtts_ft"
CASES = [
    # --- config -------------------------------------------------------------------------------
    ("config-unknown-key", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": config(training={"max_step": 3})}, 2,
     ["{ws}/{id}.yaml: training.max_step: unknown key (did you mean 'max_steps'?)"]),
    ("config-typo-section", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": {**config(), "trainig": {"max_steps": 3}}}, 2,
     ["{ws}/{id}.yaml: trainig: unknown section (did you mean 'training'?)"]),
    ("config-wrong-type", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": config(training={"max_steps": "many"})}, 2,
     ["{ws}/{id}.yaml: training.max_steps: expected int, got 'many'"]),
    ("config-negative-steps", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": config(training={"max_steps": -5})}, 2,
     ["{ws}/{id}.yaml: training.max_steps: must be >= 1"]),
    ("config-precision-mode", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": config(precision={"mode": "fp8"})}, 2,
     ["{ws}/{id}.yaml: precision.mode: expected 'auto' | 'bf16' | 'fp16' | 'fp32', got 'fp8'"]),
    ("config-on-save-error", H, ["--config", "{ws}/{id}.yaml"],
     {"{id}.yaml": config(checkpoint={"on_save_error": "sometimes"})}, 2,
     ["{ws}/{id}.yaml: checkpoint.on_save_error: expected 'continue' | 'stop', got 'sometimes'"]),
    ("config-missing-dataset", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": config(dataset={"path": "{ws}/nope"})}, 2,
     ["{ws}/{id}.yaml: dataset.path: folder '{ws}/nope' does not exist"]),
    ("config-missing-extra-text", H, ["--config", "{ws}/{id}.yaml"],
     {"{id}.yaml": config(tokenizer={"extra_text_files": ["{ws}/more.txt"]})}, 2,
     ["{ws}/{id}.yaml: tokenizer.extra_text_files: file '{ws}/more.txt' does not exist"]),
    ("config-missing-speaker-wav", H, ["--config", "{ws}/{id}.yaml"],
     {"{id}.yaml": config(evaluation={"speaker_wavs": ["{ws}/voice.wav"]})}, 2,
     ["{ws}/{id}.yaml: evaluation.speaker_wavs: file '{ws}/voice.wav' does not exist"]),
    ("config-resume-missing", H, ["--config", "{ws}/good.yaml", "--resume", "{ws}/run/checkpoints/step_000100"], {}, 2,
     ["--resume {ws}/run/checkpoints/step_000100: '{ws}/run/checkpoints/step_000100' is not auto, never, or an "
      "existing checkpoint path"]),
    ("config-resume-not-a-checkpoint", H, ["--config", "{ws}/good.yaml", "--resume", "{ws}/data"], {}, 2,
     ["--resume {ws}/data: '{ws}/data' is not a checkpoint folder (it has no meta.json); use auto, never, or a "
      "folder like <run.output_dir>/checkpoints/step_001000"]),
    ("config-invalid-yaml", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": "run:\n  seed: [1, 2\n"}, 2,
     ["{ws}/{id}.yaml: line 3 is not valid YAML (expected ',' or ']', but got '<stream end>')"]),
    ("config-not-utf8", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": b"run:\n  output_dir: caf\xe9\n"}, 2,
     ["{ws}/{id}.yaml: not UTF-8 text; save the config as UTF-8"]),
    ("config-empty", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": ""}, 2,
     ["{ws}/{id}.yaml: dataset.path: missing; set it to your dataset folder"]),
    ("config-list-with-set", H, ["--config", "{ws}/{id}.yaml", "--set", "training.lr=1e-5"], {"{id}.yaml": "- run\n- dataset\n"},
     2, ["{ws}/{id}.yaml: expected a YAML mapping with sections like 'run:' and 'dataset:'"]),
    ("config-python-tag", H, ["--config", "{ws}/{id}.yaml"],
     {"{id}.yaml": "run: !!python/object/apply:os.system ['echo pwned']\n"}, 2,
     ["{ws}/{id}.yaml: line 1: tag '!!python/object/apply:os.system' is not allowed; configs are read with safe YAML "
      "loading (plain values only), remove the tag"]),
    ("config-file-missing", H, ["--config", "{ws}/absent.yaml"], {}, 2,
     ["{ws}/absent.yaml: config file not found; pass --config with a YAML file (see configs/)"]),
    ("config-set-without-equals", H, ["--config", "{ws}/good.yaml", "--set", "training.lr"], {}, 2,
     ["--set training.lr: expected key.sub=value, e.g. --set training.lr=1e-5"]),
    ("config-set-wrong-type", H, ["--config", "{ws}/good.yaml", "--set", "training.lr=fast"], {}, 2,
     ["--set training.lr=fast: expected float, got 'fast'"]),
    ("config-section-not-mapping", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": config(training=5)}, 2,
     ["{ws}/{id}.yaml: training: expected a mapping of keys, got int"]),
    ("config-duplicate-key", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": DUPLICATE_KEY_YAML}, 2,
     ["{ws}/{id}.yaml: line 6: key 'training' given twice (first on line 4); the second would silently replace the "
      "first: keep one"]),
    ("config-warmup-not-below-max-steps", H, ["--config", "{ws}/{id}.yaml"],
     {"{id}.yaml": config(training={"max_steps": 100, "warmup_steps": 500})}, 2,
     ["{ws}/{id}.yaml: training.warmup_steps: 500 is not below training.max_steps 100, so the learning rate would "
      "never reach training.lr; lower warmup_steps (e.g. 10) or raise max_steps"]),
    ("config-max-steps-zero", H, ["--config", "{ws}/good.yaml", "--max-steps", "0"], {}, 2,
     ["--max-steps 0: must be 1 or more (optimizer steps to train for)"]),
    ("config-checkpoint-without-evaluate", H, ["--config", "{ws}/good.yaml", "--checkpoint", "{ck}/good"], {}, 2,
     ["--checkpoint {ck}/good: only used with --evaluate; add --evaluate to evaluate it, or use --resume {ck}/good "
      "to continue training from it"]),
    ("config-option-without-its-setting", H, ["--config", "{ws}/{id}.yaml"],
     {"{id}.yaml": config(training={"step_every": 50})}, 2,
     ["{ws}/{id}.yaml: training.step_every: only used with training.lr_schedule: step, but training.lr_schedule is "
      "'constant'; remove it or change that setting"]),
    ("config-several-problems", H, ["--config", "{ws}/{id}.yaml"],
     {"{id}.yaml": config(training={"lr": 3.0, "batch_size": 0}, evaluation={"temperature": 0})}, 2,
     ["{ws}/{id}.yaml: training.batch_size: must be >= 1 or 'auto'",
      "{ws}/{id}.yaml: training.lr: 3.0 is not a plausible learning rate (expected 0 < lr < 1)",
      "{ws}/{id}.yaml: evaluation.temperature: 0.0 must be in (0, 5]"]),
    # --- run folder ------------------------------------------------------------------------------
    ("run-output-dir-is-a-file", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": config(run={"output_dir": "{ws}/good.yaml"})},
     2, ["{ws}/{id}.yaml: run.output_dir: '{ws}/good.yaml' is a file; the run directory must be a folder (choose "
         "another path)"]),
    ("run-other-transcripts", H, ["--config", "{ws}/owned.yaml"], {}, 2,
     ["{ws}/owned: holds run " + OWNED + " (1 checkpoint(s), latest step_000004) and this command would start another "
      "run there: the dataset's transcripts changed: 1 edited (metadata.csv). Give the new run its own "
      "run.output_dir, or add --archive-old-run to move run " + OWNED + " (checkpoints, samples, logs) into "
      "{ws}/owned/old_runs/<date>_" + OWNED + "/ first (nothing is deleted), or add --continue-with-new-data to "
      "continue run " + OWNED + " on the changed data (its checkpoints and vocabulary kept)"]),
    ("run-resume-never-over-checkpoints", H, ["--config", "{ws}/owned_same.yaml", "--resume", "never"], {}, 2,
     ["{ws}/owned_same: holds run " + OWNED_SAME + " (1 checkpoint(s), latest step_000004) and this command would "
      "start another run there: checkpoint.resume: never starts a new run. Give the new run its own run.output_dir, "
      "or add --archive-old-run to move run " + OWNED_SAME + " (checkpoints, samples, logs) into "
      "{ws}/owned_same/old_runs/<date>_" + OWNED_SAME + "/ first (nothing is deleted)"]),
    ("run-evaluate-another-runs-checkpoint", H, ["--config", "{ws}/owned_same.yaml", "--evaluate", "--checkpoint",
                                                 "{ck}/good"], {}, 2,
     ["--checkpoint {ck}/good: belongs to run {trained_id}, not to run " + OWNED_SAME + " of {ws}/owned_same; "
      "evaluating it here would put its samples and report row into this run. Pass the --config of its own run (or "
      "a run.output_dir of its own)"]),
    # --- base model ------------------------------------------------------------------------------
    ("base-missing-folder", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": config(base_model={"source": "{ws}/xtts"})}, 2,
     ["base_model.source: folder '{ws}/xtts' does not exist; point it at an XTTS-v2 folder or a repo id such as "
      "coqui/XTTS-v2"]),
    ("base-missing-files", H, ["--config", "{ws}/{id}.yaml"], {"{id}.yaml": config(base_model={"source": "{ws}/partial_base"})},
     2, ["base model folder '{ws}/partial_base' lacks dvae.pth, mel_stats.pth; it needs the coqui/XTTS-v2 files "
         "(config.json, model.pth, vocab.json, dvae.pth, mel_stats.pth)"]),
    ("base-is-a-file", X, ["export", "--checkpoint", "{ck}/good", "--out", "{ws}/e_file", "--base-model", "{ws}/good.yaml"],
     {}, 2, ["base_model.source: '{ws}/good.yaml' is a file; it must be a folder in the XTTS-v2 layout"]),
    ("base-model-runs-code", X, ["export", "--checkpoint", "{ck}/good", "--out", "{ws}/e_evil", "--base-model",
                                 "{ws}/evil_base"], {}, 2,
     ["{ws}/evil_base/model.pth: refused to load: it would import and call 'posix.system'; " + NO_CODE]),
    # --- dataset ---------------------------------------------------------------------------------
    ("data-empty-folder", X, ["prepare", "--input", "{ws}/d_empty", "--out", "{ws}/p1"], {"d_empty/.keep": ""}, 2,
     ["'{ws}/d_empty': cannot tell the dataset layout; looked for metadata.csv (LJSpeech id|text or coqui "
      "audio_file|text|speaker_name), metadata_train.csv / metadata_eval.csv (coqui) and audio files (.wav, .flac, "
      ".mp3, .ogg) with same-named .txt transcripts, and validated.tsv/train.tsv with clips/ (Common Voice), and "
      "found none; fix the folder or pass --format"]),
    ("data-no-rows", X, ["prepare", "--input", "{ws}/d_header", "--out", "{ws}/p2"],
     {"d_header/metadata.csv": "audio_file|text|speaker_name\n"}, 2,
     ["'{ws}/d_header': the coqui layout was read but names no clips; check the metadata / transcripts"]),
    ("data-all-rejected", X, ["prepare", "--input", "{ws}/d_bad", "--out", "{ws}/p3"],
     {"d_bad/metadata.csv": "audio_file|text|speaker_name\nwavs/a.wav|ሰላም ለዓለም|s\nwavs/b.wav|ሰላም|s\n",
      "d_bad/wavs/a.wav": "not audio", "d_bad/wavs/b.wav": ""}, 2,
     ["dataset '{ws}/d_bad': no usable clips out of 2 (top rejections: unreadable 2); see {ws}/p3/report.txt for "
      "examples"]),
    ("data-unknown-format", X, ["prepare", "--input", "{ws}/data", "--out", "{ws}/p4", "--format", "csv"], {}, 2,
     ["xtts-ft prepare: error: argument --format: invalid choice: 'csv' (choose from 'auto', 'ljspeech', 'coqui', "
      "'folder', 'commonvoice', 'hf')"]),
    ("data-input-missing", X, ["prepare", "--input", "{ws}/d_none", "--out", "{ws}/p5"], {}, 2,
     ["--input '{ws}/d_none' is not a folder; pass your dataset folder"]),
    ("data-metadata-not-utf8", X, ["prepare", "--input", "{ws}/d_latin1", "--out", "{ws}/p6"],
     {"d_latin1/metadata.csv": b"audio_file|text|speaker_name\nwavs/a.wav|caf\xe9|s\n"}, 2,
     ["{ws}/d_latin1/metadata.csv: line 2 is not UTF-8 text; save the file as UTF-8"]),
    ("data-utf16-transcript", X, ["prepare", "--input", "{ws}/d_utf16", "--out", "{ws}/p7", "--format", "folder"],
     {"d_utf16/a.wav": wav_bytes(1.5), "d_utf16/a.txt": "ሰላም ለዓለም".encode("utf-16")}, 2,
     ["dataset '{ws}/d_utf16': no usable clips out of 1 (top rejections: unreadable 1); see {ws}/p7/report.txt for "
      "examples"]),
    # --- tokenizer -------------------------------------------------------------------------------
    ("tok-missing-base-vocab", X, ["tokenizer", "--base-vocab", "{ws}/vocab.json", "--text", "{ws}/am.txt", "--out",
                                   "{ws}/t1"], {"am.txt": "ሰላም ለዓለም\n"}, 2,
     ["{ws}/vocab.json: vocabulary file not found; give the path of an XTTS vocab.json"]),
    ("tok-vocab-not-json", X, ["tokenizer", "--base-vocab", "{ws}/broken.json", "--text", "{ws}/am.txt", "--out",
                               "{ws}/t2"], {"broken.json": "{\"model\": ", "am.txt": "ሰላም ለዓለም\n"}, 2,
     ["{ws}/broken.json: not valid JSON (Expecting value: line 1 column 11 (char 10)); the vocab.json is damaged, "
      "fetch it again"]),
    ("tok-vocab-not-bpe", X, ["tokenizer", "--base-vocab", "{ws}/other.json", "--text", "{ws}/am.txt", "--out",
                              "{ws}/t3"], {"other.json": "{\"model\": {\"type\": \"WordPiece\"}}", "am.txt": "ሰላም\n"}, 2,
     ["{ws}/other.json: not a BPE tokenizer file; give the vocab.json of an XTTS model"]),
    ("tok-new-tokens-too-small", X, ["tokenizer", "--base-vocab", "{base}/vocab.json", "--text", "{ws}/am.txt",
                                     "--new-tokens", "10", "--out", "{ws}/t4"], {"am.txt": "ሰላም ለዓለም\n"}, 2,
     ["{base}/vocab.json: new_tokens=10 is too small: Amharic needs at least 496 new tokens (495 Ethiopic characters, "
      "0 other new characters, [am]); set tokenizer.new_tokens to 496 or more (default 2000)"]),
    ("tok-text-not-utf8", X, ["tokenizer", "--base-vocab", "{base}/vocab.json", "--text", "{ws}/latin1.txt", "--out",
                              "{ws}/t5"], {"latin1.txt": b"ok\ncaf\xe9\n"}, 2,
     ["{ws}/latin1.txt: not UTF-8 (bad byte 0xe9 on line 2); save the file as UTF-8"]),
    ("tok-text-missing", X, ["tokenizer", "--base-vocab", "{base}/vocab.json", "--text", "{ws}/gone.txt", "--out",
                             "{ws}/t6"], {}, 2,
     ["{ws}/gone.txt: text file not found; check the path (one sentence per line, UTF-8)"]),
    # --- checkpoints: export ----------------------------------------------------------------------
    ("export-no-folder", X, ["export", "--checkpoint", "{ck}/absent", "--out", "{ws}/e1"], {}, 2,
     ["--checkpoint {ck}/absent: folder not found"]),
    ("export-no-training-state", X, ["export", "--checkpoint", "{ck}/no_state", "--out", "{ws}/e2"], {}, 2,
     ["{ck}/no_state: no training_state.pt; pass a checkpoint folder such as checkpoints/step_001000"]),
    ("export-meta-missing", X, ["export", "--checkpoint", "{ck}/no_meta", "--out", "{ws}/e3"], {}, 2,
     ["{ck}/no_meta: no meta.json; pass --base-model with the base model folder or repo id"]),
    ("export-meta-corrupt", X, ["export", "--checkpoint", "{ck}/bad_meta", "--out", "{ws}/e4"], {}, 2,
     ["{ck}/bad_meta/meta.json: unreadable (Expecting value: line 1 column 1 (char 0)); the checkpoint is damaged, use "
      "an earlier one"]),
    ("export-bit-flipped", X, ["export", "--checkpoint", "{ck}/flipped", "--out", "{ws}/e5"], {}, 2,
     ["{ck}/flipped/training_state.pt: checksum mismatch (file truncated or corrupted); delete {ck}/flipped or resume "
      "from an earlier checkpoint"]),
    ("export-into-other-folder", X, ["export", "--checkpoint", "{ck}/good", "--out", "{ws}/data"], {}, 2,
     ["--out {ws}/data: holds 9 file(s) not written by this tool: metadata.csv, wavs/spk1_001.flac, "
      "wavs/spk1_002.flac and 6 more; choose another --out, or pass --move-old-aside to move it to data.old-<date> "
      "and write a new one"]),
    ("export-state-runs-code", X, ["export", "--checkpoint", "{ck}/evil", "--out", "{ws}/e6"], {}, 2,
     ["{ck}/evil/training_state.pt: refused to load: it would import and call 'posix.system'; " + NO_CODE]),
    # --- checkpoints: synthesize ------------------------------------------------------------------
    ("synth-missing-speaker-wav", X, ["synthesize", "--model", "{ck}/good", "--text", "ሰላም", "--speaker-wav",
                                      "{ws}/voice.wav", "--out", "{ws}/o.wav", "--base-model", "{base}"], {}, 2,
     ["--speaker-wav {ws}/voice.wav: file not found; give a clean 3-10 s recording of the voice"]),
    ("synth-empty-text", X, ["synthesize", "--model", "{ck}/good", "--text", "  ", "--speaker-wav", "{voice}", "--out",
                             "{ws}/o.wav", "--base-model", "{base}"], {}, 2,
     ["--text: empty; give the text to speak"]),
    ("synth-out-not-wav", X, ["synthesize", "--model", "{ck}/good", "--text", "ሰላም", "--speaker-wav", "{voice}",
                              "--out", "{ws}/o.mp3", "--base-model", "{base}"], {}, 2,
     ["--out {ws}/o.mp3: give a .wav file name"]),
    ("synth-checkpoint-without-base", X, ["synthesize", "--model", "{ck}/good", "--text", "ሰላም", "--speaker-wav",
                                          "{voice}", "--out", "{ws}/o.wav"], {}, 2,
     ["{ck}/good: is a training checkpoint; pass the base model too, or export it first (python -m xtts_ft export "
      "--checkpoint {ck}/good --out DIR)"]),
    ("synth-not-a-model", X, ["synthesize", "--model", "{ws}/data", "--text", "ሰላም", "--speaker-wav", "{voice}",
                              "--out", "{ws}/o.wav"], {}, 2,
     ["{ws}/data: neither an export folder (model.pth + config.json) nor a checkpoint folder (training_state.pt)"]),
    ("synth-speaker-not-audio", X, ["synthesize", "--model", "{ck}/good", "--text", "ሰላም", "--speaker-wav",
                                    "{ws}/fake.wav", "--out", "{ws}/o.wav", "--base-model", "{base}"],
     {"fake.wav": "RIFF but not really"}, 2,
     ["speaker wav '{ws}/fake.wav': cannot be decoded as audio (" + DECODER + "); pass a WAV or FLAC recording of "
      "the voice"]),
    ("synth-speaker-too-short", X, ["synthesize", "--model", "{ck}/good", "--text", "ሰላም", "--speaker-wav",
                                    "{ws}/short.wav", "--out", "{ws}/o.wav", "--base-model", "{base}"],
     {"short.wav": wav_bytes(0.2)}, 2,
     ["speaker wav '{ws}/short.wav': only 0.20 s of audio; a voice reference needs at least 0.5 s (3-10 s "
      "recommended)"]),
    # --- checkpoints: resume and evaluate (these run the pipeline up to loading the checkpoint) ----
    ("resume-other-vocabulary", H, ["--config", "{ws}/good.yaml", "--resume", "{ck}/good"], {}, 2,
     ["{ck}/good: trained with vocabulary {fp_ckpt}, but the current vocab.json has fingerprint {fp_run}; token ids "
      "differ so these weights cannot continue: settings changed since it was trained: tokenizer.new_tokens: 2000 -> "
      "600 (set them back in your config to continue this run) - or " + FIX_VOCAB]),
    ("resume-no-training-state", H, ["--config", "{ws}/good.yaml", "--resume", "{ck}/no_state"], {}, 2,
     ["{ck}/no_state/training_state.pt: missing; the checkpoint is incomplete, use an earlier one"]),
    ("resume-meta-corrupt", H, ["--config", "{ws}/good.yaml", "--resume", "{ck}/bad_meta"], {}, 2,
     ["{ck}/bad_meta/meta.json: unreadable (Expecting value: line 1 column 1 (char 0)); the checkpoint is damaged, use "
      "an earlier one"]),
    ("resume-bit-flipped", H, ["--config", "{ws}/good.yaml", "--resume", "{ck}/flipped"], {}, 2,
     ["{ck}/flipped/training_state.pt: checksum mismatch (file truncated or corrupted); delete {ck}/flipped or resume "
      "from an earlier checkpoint"]),
    ("evaluate-no-checkpoint", H, ["--config", "{ws}/good.yaml", "--evaluate"], {}, 2,
     ["{ws}/run: no checkpoint to evaluate; train first or pass --checkpoint"]),
]
REAL_PROCESS = {"config-unknown-key": ["headless_train.py"], "export-bit-flipped": ["-m", "xtts_ft"]}


class RunsCode:
    def __reduce__(self):
        import os

        return (os.system, ("echo this must never run",))


def fill(value, names: dict):
    """Replace ``{name}`` placeholders (only known names: the inputs themselves may hold braces)."""
    if isinstance(value, str):
        for key, text in names.items():
            value = value.replace("{" + key + "}", text)
        return value
    if isinstance(value, list):
        return [fill(v, names) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, names) for k, v in value.items()}
    return value


def write(path: Path, content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, dict):
        path.write_text(yaml.safe_dump(content, allow_unicode=True, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(content, encoding="utf-8")


def make_checkpoints(good: Path, ck: Path) -> None:
    """Copies of a real checkpoint, each damaged one way."""
    for name in ("good", "no_state", "no_meta", "bad_meta", "flipped", "evil"):
        shutil.copytree(good, ck / name)
    (ck / "no_state" / STATE_FILE).unlink()
    (ck / "no_meta" / META_FILE).unlink()
    (ck / "bad_meta" / META_FILE).write_text("", encoding="utf-8")
    data = bytearray((ck / "flipped" / STATE_FILE).read_bytes())
    data[len(data) // 2] ^= 1
    (ck / "flipped" / STATE_FILE).write_bytes(bytes(data))
    torch.save({"gpt": RunsCode()}, ck / "evil" / STATE_FILE)
    meta = json.loads((ck / "evil" / META_FILE).read_text(encoding="utf-8"))
    meta["training_state_sha256"] = file_sha256(ck / "evil" / STATE_FILE)  # only weights_only stops it
    (ck / "evil" / META_FILE).write_text(json.dumps(meta), encoding="utf-8")


def make_owned_folder(ws: Path, names: dict, name: str, run_id: str, *, other_transcripts: bool,
                      checkpoint: Path) -> None:
    """A run folder owned by ``run_id`` with one checkpoint, and ``{name}.yaml`` (GOOD with that folder); with
    ``other_transcripts`` the recorded run was made from another version of the dataset's metadata.csv."""
    raw = fill(config(run={"output_dir": f"{{ws}}/{name}"}), names)
    write(ws / f"{name}.yaml", raw)
    fingerprint = run_fingerprint(config_from_dict(raw))
    if other_transcripts:
        fingerprint["dataset"]["transcripts"]["metadata.csv"] = "0" * 16
    write_record(ws / name, RunRecord(run_id=run_id, created="2026-01-01T00:00:00", fingerprint=fingerprint))
    step = ws / name / "checkpoints" / "step_000004"
    shutil.copytree(checkpoint, step)
    meta = json.loads((step / META_FILE).read_text(encoding="utf-8"))
    (step / META_FILE).write_text(json.dumps({**meta, "run_id": run_id}), encoding="utf-8")


@pytest.fixture(scope="module")
def sweep(trained_run, tiny_base, vocab, tmp_path_factory):
    ws = tmp_path_factory.mktemp("sweep")
    names = {"ws": str(ws), "base": str(tiny_base.root), "ck": str(ws / "ckpts"),
             "voice": str(ws / "data" / "wavs" / "spk1_001.flac")}
    rows = (DEMO / "metadata.csv").read_text(encoding="utf-8").splitlines()
    (ws / "data" / "wavs").mkdir(parents=True)
    for row in rows[1:9]:
        shutil.copyfile(DEMO / row.split("|")[0], ws / "data" / row.split("|")[0])
    (ws / "data" / "metadata.csv").write_text("\n".join(rows[:9]) + "\n", encoding="utf-8")
    write(ws / "good.yaml", fill(GOOD, names))
    shutil.copytree(tiny_base.root, ws / "partial_base", ignore=shutil.ignore_patterns("dvae.pth", "mel_stats.pth"))
    shutil.copytree(tiny_base.root, ws / "evil_base")
    torch.save({"model": RunsCode()}, ws / "evil_base" / "model.pth")
    make_checkpoints(trained_run / "checkpoints" / "step_000004", ws / "ckpts")
    make_owned_folder(ws, names, "owned", OWNED, other_transcripts=True, checkpoint=ws / "ckpts" / "good")
    make_owned_folder(ws, names, "owned_same", OWNED_SAME, other_transcripts=False, checkpoint=ws / "ckpts" / "good")

    cases = []
    for case_id, command, argv, files, _, _ in CASES:
        own = {**names, "id": case_id}
        for rel, content in files.items():
            write(ws / fill(rel, own), fill(content, own))
        cases.append({"id": case_id, "command": command, "argv": fill(argv, own)})
    (ws / "cases.json").write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
    done = subprocess.run(script_command(CLI_BATCH, ws / "cases.json", ws / "results.json"),
                          cwd=REPO, env=script_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    results = {r["id"]: r for r in json.loads((ws / "results.json").read_text(encoding="utf-8"))}
    names["fp_ckpt"] = vocab_fingerprint(vocab[0])
    names["trained_id"] = read_record(trained_run).run_id
    names["fp_run"] = vocab_fingerprint(ws / "run" / "tokenizer" / "vocab.json")
    return names, results, cases


def error_lines(stderr: str) -> list[str]:
    """What the user reads as the error: ``error: ...`` lines (argparse: ``prog: error: ...``)."""
    return [line.split("error: ", 1)[1] if line.startswith("error: ") else line
            for line in stderr.splitlines() if line.startswith("error: ") or ": error: " in line]


def own_part(line: str, expected: str) -> str:
    """``line`` with a third-party message replaced by DECODER where ``expected`` has it (and it is non-empty)."""
    if DECODER not in expected:
        return line
    head, tail = expected.split(DECODER)
    inner = line[len(head): len(line) - len(tail)]
    return DECODER.join([head, tail]) if line.startswith(head) and line.endswith(tail) and inner.strip() else line


def test_the_sweep_covers_at_least_30_bad_inputs_across_every_area():
    areas = {case[0].split("-")[0] for case in CASES}
    assert len(CASES) >= 30 and len({case[0] for case in CASES}) == len(CASES)
    assert {"config", "base", "data", "tok", "export", "synth", "resume"} <= areas


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_bad_input_gives_the_exact_message_and_no_traceback(sweep, case):
    names, results, _ = sweep
    case_id, _, _, _, exit_code, expected = case
    result = results[case_id]
    assert "Traceback" not in result["stderr"], result["stderr"][-3000:]
    lines, wanted = error_lines(result["stderr"]), fill(expected, {**names, "id": case_id})
    assert [own_part(line, want) for line, want in zip(lines, wanted)] == wanted, result["stderr"][-3000:]
    assert len(lines) == len(wanted), result["stderr"][-3000:]
    assert result["rc"] == exit_code


@pytest.mark.parametrize("case_id", sorted(REAL_PROCESS))
def test_a_real_process_prints_the_same_lines(sweep, case_id):
    names, results, cases = sweep
    argv = next(c["argv"] for c in cases if c["id"] == case_id)
    out = subprocess.run([sys.executable, *REAL_PROCESS[case_id], *argv], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == results[case_id]["rc"] == 2
    assert "Traceback" not in out.stderr
    assert error_lines(out.stderr) == error_lines(results[case_id]["stderr"])
    assert [line for line in out.stderr.splitlines() if line.startswith("error: ")] == \
        ["error: " + line for line in error_lines(results[case_id]["stderr"])]


def test_a_utf16_transcript_is_explained_as_a_text_encoding_problem(sweep):
    names, _, _ = sweep
    report = (Path(names["ws"]) / "p7" / "report.txt").read_text(encoding="utf-8")
    assert "transcript 'a.txt' is UTF-16 text; save it as UTF-8 text" in report
    assert "transcripts as UTF-8 text" in report and "re-encode the file as WAV or FLAC" not in report


def test_a_run_folder_of_another_run_is_refused_before_heavy_work(sweep):
    names, results, _ = sweep
    for case_id, folder in (("run-other-transcripts", "owned"), ("run-resume-never-over-checkpoints", "owned_same")):
        assert "prepare" not in results[case_id]["stderr"] and "tokenizer:" not in results[case_id]["stderr"]
        assert not (Path(names["ws"]) / folder / "data").exists() and not (Path(names["ws"]) / folder / "tokenizer").exists()
        assert CheckpointStore.verify(Path(names["ws"]) / folder / "checkpoints" / "step_000004")


def test_a_bad_resume_checkpoint_fails_before_heavy_work(sweep):
    _, results, _ = sweep
    for case_id in ("resume-no-training-state", "resume-meta-corrupt", "resume-bit-flipped"):
        assert "prepare" not in results[case_id]["stderr"], case_id  # before data prep and the base model
    assert "tokenizer:" in results["resume-other-vocabulary"]["stderr"]  # the vocabulary has to be built first ...
    assert "DVAE code" not in results["resume-other-vocabulary"]["stderr"]  # ... but not the model or the codes
