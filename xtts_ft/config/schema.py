"""The config schema: the dataclasses below *are* it.

Each field's default and ``help`` text is the one place a default lives (argparse, YAML and
code all read it from here). Each section checks its own values (``check``); checks across
sections and the YAML reading are in :mod:`xtts_ft.config.loading`.

Every section is frozen: a config, once built, says the same thing everywhere it is passed. A change
makes a new one (``dataclasses.replace``, or :func:`with_changes` for keys of several sections).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping, Optional, TypeVar, Union

from xtts_ft.languages import AMHARIC, BASE_LANGUAGES, LANGUAGE_ALIASES
from xtts_ft.layout import META_FILE, is_checkpoint

_T = TypeVar("_T")


def opt(default: _T, help: str) -> _T:  # noqa: A002 - mirrors argparse
    """A schema field: its default and the sentence that documents it."""
    if isinstance(default, (list, dict)):
        return field(default_factory=functools.partial(copy.copy, default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def _normalise(section: object, name: str, value: object) -> None:
    """While a (frozen) section is built, its one spelling of a value (``amh`` -> ``am``): ``__post_init__`` only,
    the documented way for a frozen dataclass; after that a change makes a new section (``dataclasses.replace``)."""
    object.__setattr__(section, name, value)


def is_local_source(source: str) -> bool:
    """A path on this machine (it exists, or is written as a path), not a Hugging Face id."""
    return Path(source).exists() or source.startswith((".", "/", "~"))


def is_hub_id(source: str) -> bool:
    """'owner/name' (a Hugging Face dataset id), not a path that merely does not exist yet."""
    return not is_local_source(source) and re.fullmatch(r"[\w.-]+/[\w.-]+", source) is not None



#: The dataset layouts ``dataset.format`` names (readers: xtts_ft/data/readers.py, commonvoice.py, hf_source.py).
DatasetFormat = Literal["auto", "ljspeech", "coqui", "folder", "commonvoice", "hf"]
# serve's choices, named once for the schema and the serve command's options
DecodePrecision = Literal["fp32", "bf16"]
VocoderPrecision = Literal["fp32", "fp16", "bf16"]
AutoOff = Literal["auto", "off"]
AutoOffOn = Literal["auto", "off", "on"]
DATASET_FORMATS: tuple[str, ...] = typing.get_args(DatasetFormat)

#: A short text is one of fewer than this many characters (of normalised text): where XTTS most often babbles past
#: the stop token. The one rule (:func:`is_short_text`) behind the dataset report's share of short clips, the short
#: pieces prepare makes, the evaluation's ``short`` bucket and the server's defaults (its retry of short pieces,
#: ``ServeConfig.short_text_chars``, and its joining of them, ``min_piece_chars``). 20 is the shortest segment a
#: Wyoming wrapper of XTTS lets through (lmoe/wyoming-xtts).
SHORT_TEXT_CHARS = 20


def is_short_text(text: str) -> bool:
    """Whether ``text`` counts as short: under :data:`SHORT_TEXT_CHARS` characters."""
    return len(text) < SHORT_TEXT_CHARS


DEFAULT_TEST_SENTENCES = [
    "ሰላም፣ እንዴት ነህ? ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው።",
    "ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ጥንታዊ ሀገር ናት።",
    "በ2015 ዓ.ም 25 ተማሪዎች ትምህርታቸውን አጠናቀቁ።",
    # Short texts (1-3 words, a number, a question): where XTTS most often babbles past the stop.
    "ሰላም።",
    "አመሰግናለሁ።",
    "15",
    "ስምህ ማን ነው?",
    # Long: near the 200-character limit of the Amharic tokenizer.
    "የአዲስ አበባ ከተማ አስተዳደር በዚህ ዓመት በሁሉም ክፍለ ከተሞች አዳዲስ ትምህርት ቤቶችን፣ ጤና ጣቢያዎችን እና የሕዝብ "
    "ቤተ መጻሕፍትን ለመገንባት ያቀደ ሲሆን ግንባታው በሚቀጥሉት ሁለት ዓመታት ውስጥ ተጠናቅቆ ለነዋሪዎች አገልግሎት "
    "እንደሚሰጥ ተገልጿል።",
]


@dataclass(frozen=True)
class RunConfig:
    output_dir: str = opt("runs/amharic", "Run directory: config, data, tokenizer, checkpoints, samples, logs.")
    seed: int = opt(1234, "Seed for every random generator (data split is hash-based and does not use it).")
    language: str = opt(AMHARIC, "Language code of the new language; 'am' or 'amh' (stored as 'am').")
    device: Literal["auto", "cpu", "cuda"] = opt("auto", "Where to train: auto picks cuda when available.")

    #: Values a key does not take, and why, said in place of "expected ...": Apple's GPU is for listening only.
    REFUSED: typing.ClassVar[dict[tuple[str, str], str]] = {
        ("device", "mps"): (
            "training on Apple's GPU is not supported: torch has no NCCL there for several processes, and this "
            "project's mixed precision (fp16 with a loss scaler, bf16) and stability checks are built and tested "
            "for CUDA and the CPU only (coqui's XTTS also fails on MPS in places); train on a CUDA machine (e.g. "
            "Lightning AI) or with run.device: cpu (slow), then listen on the Mac: serve, synthesize or ui with "
            "--device mps"),
    }

    def check(self, problems: list[str]) -> None:
        out = Path(self.output_dir)
        existing = next((p for p in (out, *out.parents) if p.exists()), None)
        if out.exists() and not out.is_dir():
            problems.append(f"run.output_dir: '{out}' is a file; the run directory must be a folder (choose another path)")
        elif existing is not None and not existing.is_dir():
            problems.append(f"run.output_dir: '{out}' cannot be created: '{existing}' is a file")
        elif existing is not None and not out.exists() and not os.access(existing, os.W_OK | os.X_OK):
            problems.append(f"run.output_dir: '{out}' cannot be created: no write permission in '{existing}'")
        if self.language not in LANGUAGE_ALIASES:
            problems.append(f"run.language: '{self.language}' is not supported; use 'am' (or 'amh')")

    def __post_init__(self) -> None:
        _normalise(self, "language", LANGUAGE_ALIASES.get(self.language, self.language))  # 'amh' is stored as 'am'


@dataclass(frozen=True)
class BaseModelConfig:
    source: str = opt(
        "coqui/XTTS-v2",
        "A local directory in the coqui/XTTS-v2 file layout, or a Hugging Face repo id to download.",
    )
    revision: Optional[str] = opt(None, "Hugging Face revision (branch, tag or commit) when source is a repo id.")
    cache_dir: Optional[str] = opt(None, "Hugging Face cache directory (default: the hub's own cache).")
    create_tiny: bool = opt(
        False,
        "Write a tiny random XTTS at `source` if that directory does not exist. Demo and tests only: "
        "it never replaces a real model you named.",
    )


@dataclass(frozen=True)
class DatasetConfig:
    path: str = opt(
        "",
        "Dataset root: an LJSpeech folder, a coqui CSV folder, audio files with .txt transcripts, a Common Voice "
        "folder (validated.tsv or train.tsv + clips/); for format hf: a parquet/arrow file or folder, or a Hugging "
        "Face dataset id.",
    )
    format: DatasetFormat = opt(
        "auto", "Layout of the dataset; auto detects the folder layouts (hf must be named)."
    )
    language: Optional[str] = opt(
        None,
        "Language of this dataset's clips; null: run.language. Another XTTS-v2 language (e.g. en) mixes clips the "
        "base model knows into the run (replay against forgetting); they keep that language's own text handling.",
    )
    speaker_name: str = opt("speaker", "Speaker name for layouts that carry none.")
    hf_split: str = opt("train", "format hf: the split to read (Hub ids and local parquet/arrow files).")
    hf_name: Optional[str] = opt(
        None, "format hf with a Hub id: the configuration (subset), e.g. am_et for google/fleurs."
    )
    hf_revision: Optional[str] = opt(None, "format hf with a Hub id: branch, tag or commit; null: main.")
    hf_cache_dir: Optional[str] = opt(None, "format hf with a Hub id: datasets cache directory (default: its own).")
    audio_column: str = opt("audio", "format hf: the Audio column (bytes and/or path of each clip).")
    text_column: str = opt("text", "format hf: the transcript column.")
    speaker_column: Optional[str] = opt(None, "format hf: a speaker column; null: every clip is speaker_name.")
    eval_fraction: float = opt(0.05, "Share of clips held out for evaluation (hash-based, stable when clips are added).")
    eval_max_clips: int = opt(200, "Upper bound on the number of evaluation clips.")
    split_by_speaker: bool = opt(False, "Split per speaker so every speaker appears in both train and eval.")
    min_duration_s: float = opt(0.5, "Shortest clip kept, in seconds.")
    max_duration_s: float = opt(11.6, "Longest clip kept, in seconds (XTTS-v2 limit: 255,995 samples at 22,050 Hz).")
    min_chars_per_second: float = opt(3.0, "Below this the transcript is probably misaligned (too short for the audio).")
    max_chars_per_second: float = opt(30.0, "Above this the transcript is probably misaligned (too long for the audio).")
    transcript_check: Optional[float] = opt(
        None,
        "Transcribe every clip with asr.model and reject it as transcript_mismatch when its CER against the "
        "transcript is above this (e.g. 0.5); null: off.",
    )
    max_text_chars: int = opt(250, "Longest normalised transcript kept, in characters.")
    trim_silence_db: float = opt(
        40.0, "Leading/trailing audio quieter than this many dB below the peak is trimmed; 0 disables trimming."
    )
    loudness: Literal["peak", "none"] = opt("peak", "Normalise each clip to a fixed peak level, or leave it.")
    peak_level: float = opt(0.95, "Target peak for loudness: peak (0-1].")
    max_clipped_fraction: float = opt(0.01, "Reject clips with more than this share of samples at full scale.")
    num_workers: int = opt(0, "Processes for data preparation; 0 uses every CPU core.")
    silence_peak_db: float = opt(-60.0, "Reject a clip as silent when its peak is below this level, in dBFS.")
    min_snr_db: Optional[float] = opt(
        15.0,
        "Reject a clip as noisy when its SNR estimate (silero-vad's speech windows against the noise floor of its "
        "pauses, before trimming) is below this, in dB; null: off. 15 keeps every clean demo clip and rejects its "
        "copies with white noise at 10 dB SNR or worse (docs/DESIGN.md, \"Quality predictor\").",
    )
    short_clip_min_share: float = opt(
        0.05,
        "Warn in the dataset report when fewer than this share of kept clips are under 2 s, or under "
        f"{SHORT_TEXT_CHARS} characters: with too few short clips, short inputs babble (a judgement, not a measured "
        "threshold).",
    )
    short_clips: Union[float, Literal["auto", "off", False]] = opt(
        "auto",
        "Short clips made from the training clips' own words (cut at pauses found by aligning each clip's text to "
        "its audio with asr.model; each piece checked like any clip and heard back by the recogniser). auto: when "
        f"fewer than short_clip_min_share of the kept clips are under {SHORT_TEXT_CHARS} characters, pieces are "
        "added up to "
        "short_clips_target_share, with asr.model when the run loads it anyway (evaluation.recognize or "
        "transcript_check; if it cannot be loaded, none are made and the report says why); a share (e.g. 0.15): "
        "pieces up to that share whenever below it; off: none.",
    )
    short_clips_target_share: float = opt(
        0.1, f"short_clips auto: the share of kept clips under {SHORT_TEXT_CHARS} characters that pieces are added "
        "up to."
    )
    short_clips_max_cer: float = opt(
        0.3,
        "short_clips: a piece is kept only when the recogniser hears its text with at most this CER (and within "
        "transcript_check, when that is set and stricter).",
    )
    cut_ending_check: bool = opt(
        True,
        "Reject clips that end in speech (a word cut off by the segmenter) as cut_ending: such clips teach the "
        "model to stop mid-word.",
    )
    cut_ending_tail_ms: float = opt(30.0, "cut_ending: the length of the clip's end that must be quiet, in ms.")
    cut_ending_margin_db: float = opt(
        10.0,
        "cut_ending: reject when the end is louder than the clip's own pauses by more than this many dB "
        "(its pause level: its quietest 20 ms, or 50 dB below its speech if that is louder).",
    )
    cut_ending_decay_db: float = opt(
        12.0,
        "cut_ending: an end whose level has fallen by at least this many dB from the loudest 20 ms of its last "
        "cut_ending_decay_ms is a last sound dying away (a tight trim), not a word cut off, and is kept.",
    )
    cut_ending_decay_ms: float = opt(
        200.0, "cut_ending: how far back from the end the fall of cut_ending_decay_db is measured, in ms."
    )
    cut_ending_max_share: float = opt(
        0.1,
        "cut_ending: when more than this share of the clips whose audio is checked end in a cut word, prepare "
        "stops with an error instead of training on the rest; 1 turns the stop off.",
    )
    metadata_files: list[str] = opt(
        [],
        "CSV files (relative to the dataset root) to read for the ljspeech/coqui layouts; empty: the standard "
        "names (metadata.csv, metadata_train.csv, metadata_eval.csv).",
    )

    def __post_init__(self) -> None:
        if self.language is not None:  # 'amh' is stored as 'am'
            _normalise(self, "language", LANGUAGE_ALIASES.get(self.language, self.language))
        if self.short_clips is False:  # YAML 1.1 reads a bare off as false
            _normalise(self, "short_clips", "off")

    def check(self, problems: list[str]) -> None:
        if not self.path:
            problems.append("dataset.path: missing; set it to your dataset folder")
        elif self.format == "hf":
            if not Path(self.path).exists() and not is_hub_id(self.path):
                problems.append(f"dataset.path: '{self.path}' is neither a local parquet/arrow file or folder nor a "
                                f"Hugging Face dataset id (owner/name)")
        elif not Path(self.path).is_dir():
            problems.append(f"dataset.path: folder '{self.path}' does not exist")
        if self.language is not None and self.language not in LANGUAGE_ALIASES and self.language not in BASE_LANGUAGES:
            problems.append(f"dataset.language: '{self.language}' is neither am nor an XTTS-v2 language "
                            f"({', '.join(BASE_LANGUAGES)}); use one of those, or null for run.language")
        if self.format == "hf" and (not self.audio_column or not self.text_column):
            problems.append("dataset.audio_column/text_column: must name the dataset's columns")
        if not 0.0 <= self.eval_fraction < 1.0:
            problems.append(f"dataset.eval_fraction: {self.eval_fraction} must be in [0, 1)")
        if self.min_duration_s <= 0 or self.max_duration_s <= self.min_duration_s:
            problems.append("dataset.min_duration_s/max_duration_s: need 0 < min_duration_s < max_duration_s")
        if not 0.0 < self.peak_level <= 1.0:
            problems.append(f"dataset.peak_level: {self.peak_level} must be in (0, 1]")
        if self.num_workers < 0:
            problems.append("dataset.num_workers: must be >= 0 (0 = every core)")
        if self.eval_max_clips < 0:
            problems.append("dataset.eval_max_clips: must be >= 0")
        if self.transcript_check is not None and self.transcript_check < 0:
            problems.append(f"dataset.transcript_check: {self.transcript_check} must be >= 0 (a CER), or null for off")
        if not 0 <= self.min_chars_per_second < self.max_chars_per_second:
            problems.append("dataset.min/max_chars_per_second: need 0 <= min_chars_per_second < max_chars_per_second")
        if self.max_text_chars < 1:
            problems.append("dataset.max_text_chars: must be >= 1")
        if self.trim_silence_db < 0:
            problems.append("dataset.trim_silence_db: must be >= 0 (0 disables trimming)")
        if not 0.0 <= self.max_clipped_fraction <= 1.0:
            problems.append(f"dataset.max_clipped_fraction: {self.max_clipped_fraction} must be in [0, 1]")
        if not 0.0 <= self.short_clip_min_share <= 1.0:
            problems.append(f"dataset.short_clip_min_share: {self.short_clip_min_share} must be in [0, 1]")
        if isinstance(self.short_clips, float) and not 0.0 < self.short_clips < 1.0:
            problems.append(f"dataset.short_clips: {self.short_clips} must be auto, off or a share in (0, 1)")
        if not 0.0 < self.short_clips_target_share < 1.0:
            problems.append(f"dataset.short_clips_target_share: {self.short_clips_target_share} must be in (0, 1)")
        if self.short_clips_max_cer < 0:
            problems.append(f"dataset.short_clips_max_cer: {self.short_clips_max_cer} must be >= 0 (a CER)")
        if not 5.0 <= self.cut_ending_tail_ms <= 500.0:
            problems.append(f"dataset.cut_ending_tail_ms: {self.cut_ending_tail_ms} must be in [5, 500] ms")
        if self.cut_ending_margin_db <= 0:
            problems.append("dataset.cut_ending_margin_db: must be > 0 dB, e.g. 20")
        if self.cut_ending_decay_db <= 0:
            problems.append("dataset.cut_ending_decay_db: must be > 0 dB, e.g. 12")
        if not self.cut_ending_tail_ms < self.cut_ending_decay_ms <= 2000.0:
            problems.append(f"dataset.cut_ending_decay_ms: {self.cut_ending_decay_ms} must be above "
                            f"cut_ending_tail_ms ({self.cut_ending_tail_ms}) and at most 2000 ms")
        if not 0.0 <= self.cut_ending_max_share <= 1.0:
            problems.append(f"dataset.cut_ending_max_share: {self.cut_ending_max_share} must be in [0, 1]")
        if self.silence_peak_db >= 0:
            problems.append("dataset.silence_peak_db: must be below 0 dBFS, e.g. -60")
        if not self.speaker_name.strip() or any(c in self.speaker_name for c in "|\r\n"):
            problems.append("dataset.speaker_name: must be non-empty and hold no '|' or line break")
        for name in self.metadata_files:
            local = self.path and Path(self.path).is_dir() and self.format != "hf"
            if local and not (Path(self.path) / name).is_file():
                problems.append(f"dataset.metadata_files: '{name}' not found in '{self.path}'")


@dataclass(frozen=True)
class TextConfig:
    fold_homophones: bool = opt(
        True,
        "Fold homophone letters (ሐ/ኀ->ሀ, ሠ->ሰ, ዐ->አ, ፀ->ጸ; ሃ->ሀ, ኣ/ዓ->አ) before tokenising. They sound the same in "
        "modern Amharic and writers mix them (ሥራ/ስራ, ፀሐይ/ጸሀይ, አመት/ዓመት): folded, every spelling of a word gets "
        "the same tokens.",
    )


@dataclass(frozen=True)
class TokenizerConfig:
    new_tokens: int = opt(2000, "How many tokens to add to the base vocabulary (Ethiopic characters included).")
    extra_text_files: list[str] = opt(
        [], "Extra Amharic text to train the BPE on: text files (one sentence per line), or folders of .txt files."
    )
    min_frequency: int = opt(2, "A merge must occur this often in the training text to be added.")
    char_limit: int = opt(200, "Sentence-splitting limit for 'am' at synthesis time, in characters.")

    def check(self, problems: list[str]) -> None:
        if self.new_tokens < 0:
            problems.append("tokenizer.new_tokens: must be >= 0")
        for f in self.extra_text_files:
            if Path(f).is_dir():
                if not any(Path(f).glob("*.txt")):
                    problems.append(f"tokenizer.extra_text_files: folder '{f}' holds no .txt file")
            elif not Path(f).is_file():
                problems.append(f"tokenizer.extra_text_files: file '{f}' does not exist")


@dataclass(frozen=True)
class EarlyStoppingConfig:
    enabled: bool = opt(False, "Stop training when the metric has not improved for `patience` evaluations in a row.")
    metric: Literal["best_metric", "eval_loss", "cer", "cer_similarity", "tail_rate"] = opt(
        "best_metric",
        "What must keep improving: best_metric (the same as checkpoint.best_metric, so the step it names is the "
        "checkpoint kept as best), eval_loss, cer, cer_similarity or tail_rate (xtts_ft/checkpoint_store.py "
        "score_of).",
    )
    patience: int = opt(3, "Evaluations in a row without an improvement before the run stops.")
    min_improvement: float = opt(
        0.0, "How much lower than the best so far a score must be to count as an improvement (in the metric's units)."
    )

    def check(self, problems: list[str]) -> None:
        if self.patience < 1:
            problems.append("training.early_stopping.patience: must be >= 1 (evaluations without improvement)")
        if self.min_improvement < 0:
            problems.append("training.early_stopping.min_improvement: must be >= 0")


@dataclass(frozen=True)
class TrainingConfig:
    max_steps: int = opt(10000, "Optimizer steps to train for (see also max_epochs: whichever comes first).")
    max_epochs: Optional[float] = opt(
        None,
        "Passes over the training clips to train for (fractions allowed); the run ends at max_steps or max_epochs, "
        "whichever comes first. Null: max_steps alone.",
    )
    early_stopping: EarlyStoppingConfig = field(default_factory=EarlyStoppingConfig)
    overfit_warning_evals: int = opt(
        3,
        "Warn once (console, events.jsonl, report banner) when the eval metric has been worse than its best for "
        "this many evaluations in a row while the training loss kept falling; 0: never. Independent of early_stopping.",
    )
    export_best_at_end: bool = opt(
        False, "At the end of training, export the best checkpoint into <run>/exports/step_NNNNNN (a stock-coqui model folder)."
    )
    batch_size: Union[int, Literal["auto"]] = opt(4, "Clips per micro-batch, or 'auto' to find the largest that fits.")
    grad_accum_steps: int = opt(1, "Micro-batches per optimizer step (effective batch = batch_size x this x GPUs).")
    effective_batch_size: Optional[int] = opt(
        None,
        "Clips per optimizer step over all GPUs. When set, grad_accum_steps is derived: "
        "ceil(effective_batch_size / (batch_size x GPUs)); with batch_size auto the batch is then lowered to the "
        "smallest size that needs the same accumulation. Null: grad_accum_steps is used as given.",
    )
    lr: float = opt(5e-6, "Peak learning rate (AdamW).")
    betas: list[float] = opt([0.9, 0.96], "AdamW betas.")
    weight_decay: float = opt(1e-2, "AdamW weight decay, applied to weight matrices only (not biases, norms).")
    warmup_steps: int = opt(500, "Linear warm-up length in optimizer steps.")
    lr_schedule: Literal["constant", "cosine", "step"] = opt("constant", "Learning rate after warm-up.")
    min_lr_ratio: float = opt(0.1, "Cosine: final LR as a share of the peak.")
    step_every: int = opt(2000, "Step schedule: multiply the LR by step_gamma every this many optimizer steps.")
    step_gamma: float = opt(0.5, "Step schedule: factor applied every step_every steps.")
    new_token_lr_multiplier: float = opt(1.0, "LR multiplier for the newly added token rows.")
    grad_clip: float = opt(1.0, "Max gradient norm (computed on unscaled gradients); 0 disables clipping.")
    num_workers: int = opt(2, "Data-loader worker processes (on a CPU run, at most cores - 1).")
    cpu_threads: Union[int, Literal["auto"]] = opt(
        "auto", "torch intra-op threads of the trainer; auto: the idle cores left after the data-loader workers "
        "(1-minute load average), at least 1."
    )
    log_every: int = opt(10, "Console and metrics.jsonl line every this many optimizer steps.")
    cache_dvae_codes: bool = opt(True, "Compute the DVAE codes of training audio once and cache them on disk.")
    gradient_checkpointing: bool = opt(False, "Recompute GPT block activations in backward to save memory.")
    gpt_forward: Literal["fast", "coqui"] = opt(
        "fast",
        "The GPT's training forward. fast: our layout of coqui's GPT (xtts_ft/gpt_forward.py: no attention mask, "
        "so attention keeps its fast kernels; no KV cache; no per-row loops), the same losses and gradients. coqui: "
        "coqui's own GPT.forward (the reference). Inference and export always use coqui's.",
    )
    compile: Union[Literal["auto", "on", "off"], bool] = opt(
        "auto",
        "torch.compile the GPT blocks of the fast training forward (xtts_ft/gpt_compile.py). auto: on for CUDA. "
        "Batch lengths are rounded up to at most 6 lengths per batch size, and at most 8 shapes are compiled (torch's "
        "recompile limit; a batch of another size, such as an out-of-memory split, is another shape): a later new shape "
        "runs eager. Each compile's time is logged and counted in the ETA; a compile failure falls back to eager with "
        "one warning line.",
    )
    length_bucketing: bool = opt(True, "Batch clips of similar length together (less padding).")
    offload_frozen: bool = opt(
        False,
        "Keep the frozen HiFiGAN decoder (with its speaker encoder) and, when DVAE codes are cached, the DVAE on the "
        "CPU during training; evaluation moves what synthesis needs to the device and back.",
    )
    trainable: Literal["all", "freeze", "lora"] = opt(
        "all",
        "Which GPT weights train (xtts_ft/train/trainable.py). all: every GPT weight. freeze: the first "
        "training.frozen_blocks GPT blocks and the base vocabulary's text rows stay as the base has them (less "
        "forgetting of the base languages). lora: low-rank adapters (peft) on the GPT blocks' attention and MLP, plus "
        "the new token rows and the text and mel heads; an export merges the adapters into plain weights.",
    )
    frozen_blocks: int = opt(15, "trainable: freeze: how many GPT blocks, counted from the input, stay frozen "
                                 "(XTTS-v2 has 30).")
    lora_rank: int = opt(16, "trainable: lora: the adapters' rank r.")
    lora_alpha: float = opt(32.0, "trainable: lora: the adapters' alpha (their update is scaled by alpha / rank).")
    lora_dropout: float = opt(0.05, "trainable: lora: dropout on the adapters' input while training.")
    lora_targets: list[str] = opt(
        ["c_attn", "c_proj", "c_fc"],
        "trainable: lora: GPT-2 modules that get adapters: c_attn (attention q/k/v), c_proj (attention and MLP "
        "output projections), c_fc (MLP input).",
    )
    min_conditioning_s: float = opt(
        3.0, "Shortest voice prompt cut from the target clip each step, in seconds (coqui: 66,150 samples)."
    )
    max_conditioning_s: float = opt(
        6.0, "Longest voice prompt cut from the target clip each step, in seconds (coqui: 132,300 samples)."
    )

    def check(self, problems: list[str]) -> None:
        if self.max_steps < 1:
            problems.append("training.max_steps: must be >= 1")
        if self.max_epochs is not None and not self.max_epochs > 0:
            problems.append("training.max_epochs: must be > 0, or null to size the run by max_steps alone")
        if self.overfit_warning_evals < 0:
            problems.append("training.overfit_warning_evals: must be >= 0 (0 = never warn)")
        self.early_stopping.check(problems)
        if isinstance(self.batch_size, int) and self.batch_size < 1:
            problems.append("training.batch_size: must be >= 1 or 'auto'")
        if self.grad_accum_steps < 1:
            problems.append("training.grad_accum_steps: must be >= 1")
        if self.effective_batch_size is not None and self.effective_batch_size < 1:
            problems.append("training.effective_batch_size: must be >= 1, or null to use grad_accum_steps as given")
        if not 0 < self.lr < 1:
            problems.append(f"training.lr: {self.lr} is not a plausible learning rate (expected 0 < lr < 1)")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            problems.append(f"training.betas: {self.betas} must be two numbers in [0, 1)")
        if self.warmup_steps < 0 or self.grad_clip < 0 or self.log_every < 1:
            problems.append("training.warmup_steps/grad_clip must be >= 0 and training.log_every >= 1")
        elif self.max_steps >= 1 and self.warmup_steps >= self.max_steps:
            problems.append(
                f"training.warmup_steps: {self.warmup_steps} is not below training.max_steps {self.max_steps}, so the "
                f"learning rate would never reach training.lr; lower warmup_steps (e.g. {self.max_steps // 10}) or "
                f"raise max_steps"
            )
        if self.num_workers < 0:
            problems.append("training.num_workers: must be >= 0 (0 loads data in the training process)")
        if self.compile in ("on", True) and self.gpt_forward != "fast":
            problems.append("training.compile: on needs training.gpt_forward: fast (it compiles that forward's blocks)")
        if isinstance(self.cpu_threads, int) and self.cpu_threads < 1:
            problems.append("training.cpu_threads: must be >= 1 or 'auto'")
        if self.new_token_lr_multiplier <= 0:
            problems.append("training.new_token_lr_multiplier: must be > 0 (1.0 = same LR as every other row)")
        if self.frozen_blocks < 0:
            problems.append("training.frozen_blocks: must be >= 0 (0 freezes only the base vocabulary's text rows)")
        if self.lora_rank < 1 or self.lora_alpha <= 0 or not 0 <= self.lora_dropout < 1:
            problems.append("training.lora_rank must be >= 1, training.lora_alpha > 0 and training.lora_dropout in [0, 1)")
        unknown = sorted(set(self.lora_targets) - {"c_attn", "c_proj", "c_fc"})
        if not self.lora_targets or unknown:
            problems.append(f"training.lora_targets: {self.lora_targets} must be a non-empty list of c_attn, c_proj, "
                            f"c_fc (unknown: {unknown})")
        if not 0 < self.min_conditioning_s <= self.max_conditioning_s:
            problems.append("training.min_conditioning_s/max_conditioning_s: need 0 < min <= max (seconds)")


@dataclass(frozen=True)
class PrecisionConfig:
    mode: Literal["auto", "bf16", "fp16", "fp32"] = opt(
        "auto", "auto: bf16 where the GPU supports it, fp16 + GradScaler on older GPUs (T4, V100), fp32 on CPU."
    )
    init_scale: float = opt(1024.0, "GradScaler initial loss scale (torch's 65536 overflows at once on XTTS).")
    growth_interval: int = opt(100, "GradScaler: clean steps before the scale doubles.")
    backoff_factor: float = opt(0.5, "GradScaler: factor applied to the scale after an overflow.")
    min_scale: float = opt(1.0, "If the scale falls below this, warn and switch the run to bf16 or fp32.")
    tf32: bool = opt(
        True,
        "On GPUs of compute capability 8.0+ (A100, L4, H100), fp32 matmuls and convolutions use TF32 tensor "
        "cores (10-bit mantissa, fp32 range; several times faster for precision.mode fp32). false: full fp32 "
        "math. No effect on the CPU or older GPUs.",
    )

    def check(self, problems: list[str]) -> None:
        if self.init_scale <= 0 or self.min_scale <= 0 or self.growth_interval < 1:
            problems.append("precision.init_scale/min_scale: must be > 0 and precision.growth_interval >= 1")
        if not 0 < self.backoff_factor < 1:
            problems.append(f"precision.backoff_factor: {self.backoff_factor} must be in (0, 1)")


@dataclass(frozen=True)
class StabilityConfig:
    max_consecutive_bad_steps: int = opt(
        10,
        "Non-finite steps in a row (each is skipped) before a rollback: the GPT weights and optimizer state return "
        "to the in-memory snapshot of a recent good step (see snapshot_every), not to a checkpoint on disk; the step "
        "count goes back with them and the loss scale stays as it is.",
    )
    rollback_lr_factor: float = opt(0.5, "LR multiplier applied at each rollback (they add up: two rollbacks at 0.5 "
                                         "train at a quarter of the LR).")
    max_rollbacks: int = opt(3, "Rollbacks allowed before the run stops with a diagnosis.")
    snapshot_every: int = opt(
        100,
        "Refresh the in-memory rollback snapshot (GPT weights and optimizer state; kept in CPU RAM, about 3x the "
        "GPT's size) after a good step once this many steps have passed since the last one.",
    )

    def check(self, problems: list[str]) -> None:
        if self.max_consecutive_bad_steps < 1 or self.max_rollbacks < 0 or self.snapshot_every < 1:
            problems.append(
                "stability.max_consecutive_bad_steps/snapshot_every: must be >= 1 and stability.max_rollbacks >= 0"
            )
        if not 0 < self.rollback_lr_factor <= 1:
            problems.append(f"stability.rollback_lr_factor: {self.rollback_lr_factor} must be in (0, 1]")


@dataclass(frozen=True)
class DvaeConfig:
    """The optional DVAE stage (xtts_ft/train/dvae_stage.py): runs before the GPT stage when finetune is set."""

    finetune: bool = opt(
        False,
        "Fine-tune the DVAE (the audio -> code model the GPT learns to predict) on the run's training audio before "
        "the GPT stage; the GPT, evaluation, checkpoints and export then use the fine-tuned dvae.pth. Off in every "
        "public XTTS recipe; peers report it helps languages whose sounds differ from XTTS's (unmeasured).",
    )
    steps: int = opt(2000, "Optimizer steps of the DVAE stage.")
    lr: float = opt(1e-5, "Learning rate of the DVAE stage (AdamW, constant after warm-up).")
    warmup_steps: int = opt(100, "Linear warm-up of the DVAE stage, in steps.")
    batch_size: int = opt(8, "Audio crops per DVAE step.")
    crop_s: float = opt(3.0, "Seconds of audio per crop (a random window of a training clip; shorter clips whole).")
    grad_clip: float = opt(1.0, "Max gradient norm of the DVAE stage; 0 disables clipping.")
    commitment_weight: float = opt(0.25, "Weight of the codebook commitment loss next to the mel reconstruction loss.")
    every_steps: int = opt(500, "Save the DVAE stage's resumable checkpoint every this many steps (and at the end).")
    eval_clips: int = opt(32, "Held-out clips (from the eval split) whose reconstruction loss is measured before and after.")
    max_bad_steps: int = opt(10, "Non-finite steps in a row (each skipped) before the DVAE stage stops with a diagnosis.")

    def check(self, problems: list[str]) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.every_steps < 1 or self.eval_clips < 1:
            problems.append("dvae.steps/batch_size/every_steps/eval_clips: must be >= 1")
        if self.lr <= 0 or self.crop_s <= 0 or self.grad_clip < 0 or self.commitment_weight < 0:
            problems.append("dvae.lr/crop_s: must be > 0; dvae.grad_clip/commitment_weight: must be >= 0")
        if self.warmup_steps < 0 or self.max_bad_steps < 1:
            problems.append("dvae.warmup_steps: must be >= 0 and dvae.max_bad_steps >= 1")


@dataclass(frozen=True)
class CheckpointConfig:
    every_steps: int = opt(1000, "Save every this many optimizer steps (and always at the end).")
    keep_last: int = opt(3, "How many recent checkpoints to keep.")
    keep_best: bool = opt(True, "Also keep the best checkpoint by checkpoint.best_metric.")
    best_metric: Literal["eval_loss", "cer", "cer_similarity", "tail_rate"] = opt(
        "eval_loss",
        "What 'best' means: eval_loss; cer (mean CER of the evaluation samples, needs evaluation.recognize); "
        "cer_similarity (CER + 0.5 x (1 - speaker similarity)); tail_rate (sample_tail_rate, the share of samples "
        "that kept talking after their text; needs evaluation.recognize and evaluation.quality). See "
        "xtts_ft/checkpoint_store.py (score_of).",
    )
    resume: str = opt("auto", "auto (latest in the run dir), never, or a checkpoint path.")
    on_save_error: Literal["continue", "stop"] = opt(
        "stop", "When a save fails (e.g. disk full): keep training, or stop cleanly. The previous checkpoint stays."
    )
    optimizer_state: Literal["all", "latest"] = opt(
        "all", "latest: only the newest checkpoint keeps the optimizer state (twice the GPT's size); older and best "
        "ones keep weights only (they still export, evaluate and load; resume uses the latest full one)."
    )
    disk_budget_gb: Optional[float] = opt(
        None, "Disk the run may fill, in GB, checked before training; null: the free space of the run directory."
    )

    def check(self, problems: list[str]) -> None:
        if self.every_steps < 1 or self.keep_last < 1:
            problems.append("checkpoint.every_steps and checkpoint.keep_last: must be >= 1")
        if self.disk_budget_gb is not None and self.disk_budget_gb <= 0:
            problems.append("checkpoint.disk_budget_gb: must be > 0 GB, or null to use the free space")
        # a torchrun worker other than rank 0 leaves the path to rank 0, which alone reads it (its machine's disk
        # may be the only one that holds it; a refusal on rank 0 stops every rank)
        if self.resume not in ("auto", "never") and int(os.environ.get("RANK", "0") or 0) == 0:
            if not Path(self.resume).exists():
                problems.append(f"checkpoint.resume: '{self.resume}' is not auto, never, or an existing checkpoint path")
            elif not is_checkpoint(Path(self.resume)):  # caught here, before data prep and model loading
                problems.append(
                    f"checkpoint.resume: '{self.resume}' is not a checkpoint folder (it has no {META_FILE}); use auto, "
                    f"never, or a folder like <run.output_dir>/checkpoints/step_001000"
                )


@dataclass(frozen=True)
class EvaluationConfig:
    every_steps: int = opt(1000, "Eval losses and samples every this many optimizer steps (and at the end); 0: end only.")
    max_eval_batches: int = opt(50, "Upper bound on eval batches per evaluation.")
    sentences: list[str] = opt(DEFAULT_TEST_SENTENCES, "Test sentences to synthesise (normalised like training text).")
    speaker_wavs: list[str] = opt([], "Reference clips for the voice; empty: clips from the eval set.")
    max_speakers: int = opt(2, "How many eval-set speakers to use when speaker_wavs is empty.")
    temperature: float = opt(0.7, "Sampling temperature for synthesis.")
    mcd_clips: int = opt(
        4,
        "Eval clips re-synthesised from their own text with their own audio as the voice, to measure "
        "mel-cepstral distortion (MCD) against the recording; 0: none.",
    )
    max_new_tokens: Optional[int] = opt(
        None, "Upper bound on audio codes generated per sample (about 21.5 per second); null: the model's limit."
    )
    recognize: bool = opt(
        True,
        "Transcribe every sample with asr.model for sample_cer (and CER per length bucket). Off: no download "
        "and no CER; speaker similarity is still measured.",
    )
    cer_floor_clips: int = opt(
        50,
        "The CER floor: eval clips whose real recordings asr.model transcribes once per run; the report shows "
        "each checkpoint's CER against this floor (a sample is not heard better than the real voice); 0: off.",
    )
    quality: bool = opt(
        True,
        "Listen to every sample: DNSMOS's predicted quality (sample_quality_mos, beside reference_quality_mos of the "
        "real eval clips scored the same way) and, with recognize, the speech after the text's last word "
        "(sample_tail_rate). DNSMOS was trained on English ratings: read the difference, not the number.",
    )
    quality_clips: int = opt(
        20, "Real eval clips DNSMOS scores once per run for reference_quality_mos (the recordings' own score); 0: none."
    )
    max_tail_s: float = opt(
        0.3,
        "A sample 'kept talking' when more than this many seconds of speech follow its text's last word; "
        "sample_tail_rate is the share of samples that did.",
    )
    language_clips: int = opt(
        4,
        "Eval clips per other language of the run (one with a recogniser in asr.per_language) re-synthesised in "
        "that language, with their own recording as the voice, for sample_cer_<language>; 0: none.",
    )
    eval_at_start: bool = opt(
        True, "Evaluate once before the first step of a new run: the baseline that later eval losses compare with."
    )

    def check(self, problems: list[str]) -> None:
        if self.every_steps < 0 or self.max_eval_batches < 1:
            problems.append("evaluation.every_steps: must be >= 0 and evaluation.max_eval_batches >= 1")
        for f in self.speaker_wavs:
            if not Path(f).is_file():
                problems.append(f"evaluation.speaker_wavs: file '{f}' does not exist")
        if self.mcd_clips < 0:
            problems.append("evaluation.mcd_clips: must be >= 0 (0 = no MCD)")
        if self.cer_floor_clips < 0:
            problems.append("evaluation.cer_floor_clips: must be >= 0 (0 = no CER floor)")
        if self.quality_clips < 0:
            problems.append("evaluation.quality_clips: must be >= 0 (0 = no reference quality)")
        if self.max_tail_s <= 0:
            problems.append(f"evaluation.max_tail_s: {self.max_tail_s} must be > 0 seconds, e.g. 0.3")
        if self.language_clips < 0:
            problems.append("evaluation.language_clips: must be >= 0 (0 = no CER for the run's other languages)")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            problems.append("evaluation.max_new_tokens: must be >= 1, or null for the model's limit")
        if not 0.0 < self.temperature <= 5.0:
            problems.append(f"evaluation.temperature: {self.temperature} must be in (0, 5]")


@dataclass(frozen=True)
class LanguageAsrConfig:
    """``asr.per_language.<code>``: the recogniser for one more language (batch size, device, cache: as ``asr``)."""

    model: str = opt("", "Speech recogniser for this language: a Hugging Face repo id or a local CTC model folder.")
    revision: Optional[str] = opt(None, "Hugging Face revision of this model when it is a repo id; null: main.")


@dataclass(frozen=True)
class AsrConfig:
    model: str = opt(
        "agkphysics/wav2vec2-large-xlsr-53-amharic",
        "Speech recogniser used for CER and the transcript check: a Hugging Face repo id or a local folder "
        "holding a transformers CTC model (config.json, weights, preprocessor and tokenizer files).",
    )
    revision: Optional[str] = opt(
        None, "Hugging Face revision (branch, tag or commit) of asr.model when it is a repo id; null: main."
    )
    cache_dir: Optional[str] = opt(None, "Hugging Face cache directory (default: the hub's own cache).")
    batch_size: int = opt(8, "Clips recognised per forward pass.")
    device: Literal["auto", "cpu", "cuda"] = opt("auto", "Where the recogniser runs: auto picks cuda when available.")
    per_language: dict[str, LanguageAsrConfig] = opt(
        {},
        "Recognisers for the run's other languages (datasets with another `language`, e.g. English replay), by "
        "language code: `en: {model: ...}`. Evaluation then logs sample_cer_<code> for that language's eval clips; "
        "a language without one gets eval_loss_<code> only. asr.model stays the run language's recogniser.",
    )

    def check(self, problems: list[str]) -> None:
        if not self.model:
            problems.append("asr.model: must name a repo id or a local folder")
        if self.batch_size < 1:
            problems.append("asr.batch_size: must be >= 1")
        for code, entry in self.per_language.items():
            if not entry.model:
                problems.append(f"asr.per_language.{code}.model: must name a repo id or a local folder")

    @staticmethod
    def missing_folder(key: str, folder: object) -> str:
        """The line for a recogniser folder that does not exist (the config's checks, xtts_ft/asr/model_files.py)."""
        return (f"{key}: folder '{folder}' does not exist; point it at a transformers CTC model folder or a repo id "
                f"such as {AsrConfig.model}")

    def folder_problems(self, uses: str, per_language: bool) -> list[str]:
        """The recognisers written as local folders that do not exist, for a run that loads them (``uses``: why);
        ``per_language``: the run loads those of asr.per_language too."""
        models = [("asr.model", self.model)]
        if per_language:
            models += [(f"asr.per_language.{code}.model", entry.model) for code, entry in self.per_language.items()]
        return [f"{self.missing_folder(key, model)} (this run loads it for {uses})" for key, model in models
                if model and is_local_source(model) and not Path(model).expanduser().is_dir()]

    def for_language(self, language: str) -> AsrConfig:
        """Settings of ``asr.per_language[language]`` (model, revision) with the shared ones of ``asr``."""
        entry = self.per_language[language]
        return dataclasses.replace(self, model=entry.model, revision=entry.revision, per_language={})


@dataclass(frozen=True)
class IngestConfig:
    """``python -m xtts_ft ingest``: long recordings to clips (duration bounds come from dataset.*)."""

    min_score: float = opt(
        0.4,
        "Lowest alignment score a clip may have (mean recogniser probability of its letters at the aligned "
        "frames, 0-1); clips below it are rejected as low_score.",
    )
    max_pad_s: float = opt(0.5, "Most silence kept before the first and after the last word of a clip, in seconds.")
    min_pause_s: float = opt(0.3, "Shortest silence that separates two clips in VAD mode (and splits a long sentence).")
    vad_threshold: float = opt(0.5, "silero-vad speech probability above which a 32 ms window counts as speech.")
    block_s: float = opt(60.0, "Seconds of audio decoded at a time: a long file is never read into memory at once.")
    window_s: float = opt(
        90.0, "Seconds of audio one forced-alignment call sees at most (its cost grows with frames x letters)."
    )
    max_subtitle_offset_s: float = opt(
        10.0, "Largest offset between subtitle cues and speech that is corrected; a larger one is reported and "
        "the cues' clips are rejected."
    )

    def check(self, problems: list[str]) -> None:
        if not 0.0 <= self.min_score <= 1.0:
            problems.append(f"ingest.min_score: {self.min_score} must be in [0, 1]")
        if self.max_pad_s < 0 or self.min_pause_s <= 0:
            problems.append("ingest.max_pad_s must be >= 0 and ingest.min_pause_s > 0")
        if not 0.0 < self.vad_threshold < 1.0:
            problems.append(f"ingest.vad_threshold: {self.vad_threshold} must be in (0, 1)")
        if self.block_s < 1.0 or self.window_s < 10.0:
            problems.append("ingest.block_s must be >= 1 and ingest.window_s >= 10 (seconds)")
        if self.max_subtitle_offset_s < 0:
            problems.append("ingest.max_subtitle_offset_s: must be >= 0")


@dataclass(frozen=True)
class ServeConfig:
    """``python -m xtts_ft serve`` and the synthesis engine (``xtts_ft/serve/``); command-line flags, not a
    section of the run config."""

    host: str = opt("127.0.0.1", "Address to listen on; 127.0.0.1 (this machine only) unless you mean to share it.")
    port: int = opt(8020, "HTTP port (8020: where xtts-api-server listens, which many apps' presets expect).")
    seed: int = opt(0, "Seed of every request's sampling: the same text and voice give the same audio.")
    max_seconds_per_char: float = opt(
        0.25, "Most seconds of speech one character of normalised text may take; generation is capped there "
        "(plus min_piece_s), which cuts babbling on short texts (about 0.08 s per character is typical).",
    )
    min_piece_s: float = opt(1.0, "Seconds of speech every piece may take on top of max_seconds_per_char.")
    short_text_chars: int = opt(
        SHORT_TEXT_CHARS - 1, f"A piece of at most this many characters counts as short; the default is the "
        f"project's short text (under {SHORT_TEXT_CHARS} characters, as the dataset report and the evaluation count "
        f"it).",
    )
    short_text_retries: int = opt(
        2, "A short piece that reaches its cap without the stop token is generated again with the next seed, at "
        "most this many times; the first that stops is kept.",
    )
    min_piece_chars: int = opt(
        SHORT_TEXT_CHARS, "When long text is split, a piece shorter than this is joined to its neighbour (the default: "
        "a short text, as short_text_chars counts it).",
    )
    max_input_chars: int = opt(4096, "Longest input accepted per request (OpenAI's limit).")
    max_upload_mb: float = opt(10.0, "Largest voice clip accepted as an upload, in MB.")
    queue_size: int = opt(
        16, "Requests admitted at once (being spoken or waiting for the model, streams included); one more gets "
        "503 with Retry-After.",
    )
    max_active_streams: int = opt(
        16, "Requests the model decodes together in one batch (each holds a cache of the GPT's keys and values: "
        "memory); admitted requests beyond it wait in order for a free place.",
    )
    stream_first_chunk_codes: int = opt(
        10, "Audio codes decoded before the first audio of a piece is vocoded and sent (10 codes ~ 0.45 s of "
        "speech): smaller is sooner audio, at the cost of one more vocoder call.",
    )
    stream_chunk_codes: int = opt(
        40, "Audio codes per later chunk of a streamed piece, at most: chunks double from the first one's size up to "
        "this (10, 20, 40, 40, ... codes), so the second chunk is ready before the first one's audio runs out; larger "
        "means fewer, longer vocoder calls.",
    )
    vocoder_batch: int = opt(
        16, "On CUDA, most streamed chunks of different callers HiFiGAN vocodes in one call (the chunks waiting when "
        "a call starts); 1: one chunk per call. On an H200, 8 and 32 windows took 3.7x and 4.4x less time in one call "
        "(benchmarks/vocoder_windows.py). The CPU always vocodes one chunk per call (batching measured slower there).",
    )
    decode_precision: DecodePrecision = opt(
        "fp32", "The GPT's decode on CUDA: fp32, or bf16 (a copy of the GPT-2 blocks with its weights cast once; "
        "needs compute capability 8.0+). Under autocast, bf16 paid on an H200 only with CUDA graphs and many callers "
        "(a step for 32 rows 8.8 against 13.4 ms; for one row 5.1 against 4.1 ms, and without graphs 3-4x slower than "
        "fp32); the weights cast once are not measured on a card yet. The CPU always decodes in fp32.",
    )
    vocoder_precision: VocoderPrecision = opt(
        "fp32", "HiFiGAN on CUDA: fp32, fp16 or bf16 (autocast). On an H200 neither paid: fp16 took 3.2x longer than "
        "fp32, bf16 0.85x as long, its largest difference 1/50 of the peak (benchmarks/gpu_smoke.py section "
        "10). The CPU always vocodes in fp32.",
    )
    vocoder_stream: AutoOff = opt(
        "auto", "auto: on CUDA, the streamed chunks are vocoded on a CUDA stream of their own, so HiFiGAN's kernels run "
        "beside the decode steps instead of queueing behind them (and the steps behind HiFiGAN); off: one stream for "
        "both. The CPU has no streams.",
    )
    decode_overlap: AutoOff = opt(
        "auto", "auto: on CUDA, each decode step is launched before the step before it is read back, so the host's "
        "work of a step (the readers' codes, the next launches) runs while the GPU computes; the same codes, and a "
        "row that finished is computed once more for nothing. off: launch, read, launch. The CPU never overlaps "
        "(nothing runs ahead there). Not measured on a card yet.",
    )
    warm_up: AutoOffOn = opt(
        "auto", "Before listening, speak a short sentence to 1, 2, 4, ... max_active_streams callers at once, so the "
        "first callers do not pay the one-time costs (CUDA graph recordings, cuDNN's kernel choice, the voice's "
        "latents); auto: on CUDA only (on a CPU it would take minutes).",
    )
    decode_graphs: AutoOffOn = opt(
        "auto", "auto (on on CUDA, off on a CPU) or on: the GPT's decode step and each request's prefill on CUDA are "
        "replayed from CUDA graphs (one launch instead of about 450 a step; on an H200 a step for 1/8/32 rows took "
        "4.1/7.6/13.4 ms against 18.3/19.9/24.4 eager). Each recording is checked against the eager computation, and "
        "graphs turn off if they differ. The decode "
        "cache is then laid out once for max_active_streams rows (about 0.3 GB per row in fp32 for XTTS-v2). The "
        "CPU never uses them.",
    )


@dataclass(frozen=True)
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    base_model: BaseModelConfig = field(default_factory=BaseModelConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    text: TextConfig = field(default_factory=TextConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    stability: StabilityConfig = field(default_factory=StabilityConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    asr: AsrConfig = field(default_factory=AsrConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    dvae: DvaeConfig = field(default_factory=DvaeConfig)
    # `dataset:` given as a list in YAML: entries 2..n (the first is `dataset`); not a section of its own.
    more_datasets: list[DatasetConfig] = field(default_factory=list, repr=False)

    @property
    def run_dir(self) -> Path:
        return Path(self.run.output_dir)

    @property
    def datasets(self) -> list[DatasetConfig]:
        """Every dataset of the run, in config order (one unless `dataset:` is a list)."""
        return [self.dataset, *self.more_datasets]

    def dataset_language(self, ds: DatasetConfig) -> str:
        return ds.language or self.run.language

    def recognizer_settings(self, language: str) -> Optional[AsrConfig]:
        """The ``asr`` settings that recognise ``language``: ``asr`` itself for the run's language, an
        ``asr.per_language`` entry for another; None: no recogniser is named for it."""
        run = LANGUAGE_ALIASES.get(self.run.language, self.run.language)
        if LANGUAGE_ALIASES.get(language, language) == run:
            return self.asr
        return self.asr.for_language(language) if language in self.asr.per_language else None


def with_changes(cfg: Config, **sections: Mapping[str, object]) -> Config:
    """A new config: ``cfg`` with keys of its sections replaced, e.g. ``with_changes(cfg, run={"device": "cpu"},
    training={"max_steps": 5})``; ``cfg`` stays as it was. The values are taken as given (not checked)."""
    return dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **values)
                                       for name, values in sections.items()})


def field_choices(section: type, name: str) -> tuple[str, ...]:
    """The values a ``Literal`` config field allows (the schema states them once; the CLI and checks reuse them)."""
    return tuple(typing.get_args(typing.get_type_hints(section)[name]))


def field_help(section: type, name: str) -> str:
    """A config field's help text: the schema documents each option once, the CLI reuses it."""
    return str(next(f for f in dataclasses.fields(section) if f.name == name).metadata.get("help", ""))
