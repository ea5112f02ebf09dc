"""The model card of a published voice: Hub metadata plus what was measured, from the run's own records.

Every number on the card is read from what the run wrote, never typed in: the evaluation record of
the published step in ``samples/index.jsonl`` (CER, speaker similarity, stop rate, per length
bucket, and the samples themselves), else the ``eval_metrics`` the trainer kept in the checkpoint's
``meta.json``; the recogniser that heard the samples from the checkpoint's (or run's) ``config.yaml``;
hours and speakers from ``data/report.json``. What is missing is said to be missing.

The YAML front matter is written by huggingface_hub (:class:`ModelCardData`), so it is exactly
what the Hub parses.

The card never claims more than the records show: only a model fine-tuned from XTTS-v2 (its base
folder is XTTS-v2's, :func:`is_xtts_v2`) gets ``base_model: coqui/XTTS-v2`` and "the speaker encoder
and decoder are XTTS-v2's"; on another base (the demo's tiny random model) the card says which base it
was, and that its speaker similarity means nothing (an untrained speaker encoder rates every pair of
voices near 1).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, TypedDict

import yaml
from huggingface_hub import ModelCard, ModelCardData

from xtts_ft.config import SHORT_TEXT_CHARS, RunConfig, ServeConfig
from xtts_ft.errors import ModelError
from xtts_ft.evaluate.intelligibility import LENGTH_BUCKETS, length_bucket
from xtts_ft.evaluate.listening import QUALITY_NOTE, TAIL_NOTE
from xtts_ft.evaluate.readme import tokenizer_lines
from xtts_ft.json_types import JsonObject
from xtts_ft.layout import CheckpointLayout, RunLayout
from xtts_ft.run_history import EvalRecord, read_evaluations

if TYPE_CHECKING:
    from xtts_ft.serve.model_source import ResolvedModel

log = logging.getLogger(__name__)

BASE_MODEL = "coqui/XTTS-v2"
LICENSE_NAME = "coqui-public-model-license"
LICENSE_LINK = "https://coqui.ai/cpml"
MAX_SAMPLES = 3  # audio clips on the card: one per length bucket where the evaluation has one
LOCAL_DIR = "xtts_voice"  # the folder name the card's download line uses
VOICE_EXAMPLE = "narrator"  # the voice name the card's serve lines use
CARD_TEMPLATE = "---\n{{ card_data }}\n---\n\n{{ body }}"  # huggingface_hub fills the front matter


class DataFacts(TypedDict, total=False):
    """The training data as data/report.json says (values as read); empty when there is no report."""

    hours: Optional[float]
    speakers: int
    clips: Optional[int]
    train_clips: Optional[int]
    eval_clips: Optional[int]
    datasets: list[JsonObject]  # name, language, hours, kept of each dataset of a run that mixes several


@dataclass
class CardFacts:
    """Everything the card states, gathered once (also written to the folder as JSON)."""

    repo_id: str
    language: str
    step: Optional[int]
    export_meta: JsonObject
    metrics: dict[str, Optional[float]] = field(default_factory=dict)  # summarize() keys: sample_cer, ...
    metrics_source: Optional[str] = None  # where the metrics were read
    recognizer: Optional[str] = None  # asr.model (@revision) that transcribed the samples
    samples: list[JsonObject] = field(default_factory=list)  # index.jsonl sample records picked for the card
    data: DataFacts = field(default_factory=DataFacts)

    @property
    def base_name(self) -> str:
        """The base model's folder name (never the local path)."""
        return Path(str(self.export_meta.get("base_model") or "unknown")).name

    @property
    def base_is_xtts_v2(self) -> bool:
        return is_xtts_v2(self.export_meta)

    def to_json(self) -> JsonObject:
        return {"repo_id": self.repo_id, "language": self.language, "step": self.step, "metrics": self.metrics,
                "metrics_source": self.metrics_source, "recognizer": self.recognizer, "data": self.data,
                "samples": [{k: s.get(k) for k in ("file", "text", "cer", "recognized_text", "ended_with_stop",
                                                   "speaker_similarity", "duration_s", "tail_s", "quality_mos")}
                            for s in self.samples]}


def is_xtts_v2(export_meta: JsonObject) -> bool:
    """Whether the export's base model is XTTS-v2: its folder (the Hub's cache, ``models--coqui--XTTS-v2``,
    or a download named after it) says so. Anything else (the tiny random model, a model of one's own) is not."""
    return "xtts-v2" in str(export_meta.get("base_model") or "").lower()


def read_json(path: Path) -> JsonObject:
    """A JSON object from ``path``; {} when absent or not an object (the card then says "not recorded")."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelError(f"{path}: not valid JSON ({exc}); restore it or publish another folder") from None
    return data if isinstance(data, dict) else {}


def _eval_record(run_dir: Path, step: int) -> Optional[EvalRecord]:
    """The last evaluation of ``step`` in samples/index.jsonl (a resumed run may have evaluated it twice)."""
    index = read_evaluations(run_dir)
    for n in index.skipped:
        log.warning("%s line %d: not an evaluation record, skipped", index.path, n)
    return next((r for r in reversed(index.records) if r.step == step), None)


def _run_config(resolved: ResolvedModel, export_meta: JsonObject) -> JsonObject:
    """The config the checkpoint was trained with (its own copy first, the run's otherwise)."""
    candidates: list[Path] = []
    if resolved.loads_as == "checkpoint":
        candidates.append(CheckpointLayout(resolved.model_dir).config)
    if export_meta.get("source_checkpoint"):
        candidates.append(CheckpointLayout(Path(export_meta["source_checkpoint"])).config)
    if resolved.run_dir is not None:
        candidates.append(RunLayout(resolved.run_dir).config)
    for path in candidates:
        if path.is_file():
            try:
                raw = yaml.safe_load(path.read_text(encoding="utf-8"))
            except yaml.YAMLError:
                log.warning("%s: not valid YAML; the card cannot name the recogniser from it", path)
                continue
            if isinstance(raw, dict):
                return raw
    return {}


def _recognizer(config: JsonObject) -> Optional[str]:
    asr_section, evaluation_section = config.get("asr"), config.get("evaluation")
    asr: JsonObject = asr_section if isinstance(asr_section, dict) else {}
    evaluation: JsonObject = evaluation_section if isinstance(evaluation_section, dict) else {}
    if not asr.get("model") or evaluation.get("recognize") is False:
        return None
    model = str(asr["model"])
    if model.count("/") > 1 or model.startswith(".") or Path(model).is_absolute() or Path(model).is_dir():
        # a local folder (a Hub id is OWNER/NAME): its name, never this machine's path
        return f"{Path(model).name} (a local recogniser folder, not on the Hub)"
    return f"{model}@{asr['revision']}" if asr.get("revision") else model


def _pick_samples(record: EvalRecord) -> list[JsonObject]:
    """One sample per length bucket (short texts first: that is where XTTS fine-tunes fail)."""
    picked: list[JsonObject] = []
    for bucket in LENGTH_BUCKETS:
        for s in record.samples:
            if s.get("path") and length_bucket(s.get("normalized_text") or "") == bucket:
                picked.append(s)
                break
    return picked[:MAX_SAMPLES]


def _data_facts(run_dir: Path) -> DataFacts:
    report = read_json(RunLayout(run_dir).data_report)
    if not report:
        return {}
    speakers = report.get("speakers") or {}
    return DataFacts(hours=report.get("hours"), speakers=len(speakers), clips=report.get("kept"),
                     train_clips=report.get("kept_train"), eval_clips=report.get("kept_eval"),
                     datasets=[{k: d.get(k) for k in ("name", "language", "hours", "kept")}
                               for d in report.get("datasets") or [] if isinstance(d, dict)])


def gather_facts(resolved: ResolvedModel, export_meta: JsonObject, repo_id: str) -> CardFacts:
    """The card's facts for ``resolved`` (:class:`xtts_ft.serve.model_source.ResolvedModel`), whose export
    (in the folder being published) wrote ``export_meta``."""
    step = export_meta.get("step")
    facts = CardFacts(repo_id=repo_id, language=str(export_meta.get("language") or RunConfig.language), step=step,
                      export_meta=export_meta)
    if not facts.base_is_xtts_v2:
        log.warning("publish: the base model was %s, not %s; the card says so, names no base_model in its metadata "
                    "and marks its speaker similarity as meaningless", facts.base_name, BASE_MODEL)
    run_dir = resolved.run_dir
    record = _eval_record(run_dir, step) if run_dir is not None and step is not None else None
    if record is not None:
        facts.metrics = dict(record.metrics)
        facts.metrics_source = f"the run's samples/index.jsonl (the evaluation of step {step})"
        facts.samples = _pick_samples(record)
    else:  # the run folder is gone or never evaluated this step: the trainer's copy in meta.json, if any
        meta = export_meta.get("checkpoint_meta") or {}
        if meta.get("eval_metrics"):
            facts.metrics = dict(meta["eval_metrics"])
            facts.metrics_source = "the checkpoint's meta.json"
    if "eval_loss" not in facts.metrics and (export_meta.get("checkpoint_meta") or {}).get("eval_loss") is not None:
        facts.metrics["eval_loss"] = export_meta["checkpoint_meta"]["eval_loss"]
    if "sample_cer" in facts.metrics:
        facts.recognizer = _recognizer(_run_config(resolved, export_meta))
    if run_dir is not None:
        facts.data = _data_facts(run_dir)
    return facts


# --- rendering ---------------------------------------------------------------------------------


def _num(value: Optional[float], digits: int = 3) -> str:
    return "not measured" if value is None else f"{float(value):.{digits}g}"


def _quality_section(f: CardFacts) -> str:
    m = f.metrics
    if not m:
        return ("## Measured quality\n\nNo evaluation of this checkpoint was found (the run folder was not "
                "beside the export, or the step was never evaluated): nothing was measured for this card.\n")
    if "sample_cer" not in m:
        heard = "not transcribed by a recogniser (evaluation.recognize was off), so there is no CER"
    elif f.recognizer:
        heard = f"transcribed by the speech recogniser `{f.recognizer}`"
    else:  # the run's config is not on this disk any more
        heard = "transcribed by a speech recogniser that the records found here do not name"
    similarity = m.get("sample_speaker_similarity")
    rows = [("CER (character error rate, all samples)", _num(m.get("sample_cer"))),
            (f"CER, short texts (under {SHORT_TEXT_CHARS} characters)", _num(m.get("sample_cer_short"))),
            ("speaker similarity (XTTS speaker encoder, sample vs. reference)",
             _num(similarity) if f.base_is_xtts_v2 or similarity is None
             else f"{_num(similarity)} (meaningless here, see below)"),
            ("stop rate (samples that ended by themselves)", _num(m.get("sample_stop_rate"))),
            ("stop rate, short texts", _num(m.get("sample_stop_rate_short"))),
            ("tail rate (samples that kept talking after their text)", _num(m.get("sample_tail_rate"))),
            ("tail rate, short texts", _num(m.get("sample_tail_rate_short"))),
            ("predicted quality of the samples (DNSMOS, 1-5)", _num(m.get("sample_quality_mos"))),
            ("predicted quality of the training recordings, scored the same way", _num(m.get("reference_quality_mos"))),
            ("eval loss (teacher-forced, held-out clips)", _num(m.get("eval_loss")))]
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    caveat = "" if f.base_is_xtts_v2 or similarity is None else (
        f"\nSpeaker similarity is measured with the base model's own speaker encoder, and this base model "
        f"(`{f.base_name}`) is not {BASE_MODEL}: its encoder is not XTTS-v2's trained one (a random encoder, as in "
        f"the project's tiny test model, rates every pair of voices near 1), so the number says nothing about "
        f"the voice.\n")
    return f"""## Measured quality (step {f.step})

The evaluation samples of this checkpoint were {heard}; read from {f.metrics_source}.

| measure | value |
|---|---|
{table}

CER is scored after the project's normaliser on both sides (numbers read out, homophone letters folded,
punctuation dropped). It includes the recogniser's own error, so it is a ceiling on the model's error,
and it is comparable only between models scored by the same recogniser. A stop rate below 1 means
some samples ran to the length limit instead of ending (babbling).
{QUALITY_NOTE} {TAIL_NOTE}
{caveat}"""


def _data_section(f: CardFacts) -> str:
    d = f.data
    if not d:
        return "## Training data\n\nNot recorded here (the run's data/report.json was not found).\n"
    lines = [f"- {_num(d.get('hours'))} hours of audio kept after the data checks, {d.get('clips')} clips "
             f"({d.get('train_clips')} training, {d.get('eval_clips')} held out), {d.get('speakers')} speaker(s)."]
    for ds in d.get("datasets") or []:
        lines.append(f"- dataset `{ds.get('name')}` ({ds.get('language')}): {_num(ds.get('hours'))} hours, "
                     f"{ds.get('kept')} clips")
    return "## Training data\n\n" + "\n".join(lines) + "\n"


def _samples_section(f: CardFacts, endpoint: str) -> str:
    if not f.samples:
        return ""
    out = ["## Samples\n", f"From the evaluation at step {f.step} (voice: a held-out clip of the training data).\n"]
    for s in f.samples:
        url = f"{endpoint.rstrip('/')}/{f.repo_id}/resolve/main/{s['file']}"
        stop = "ended by itself" if s.get("ended_with_stop") else "ran to the length limit"
        heard = f"; heard: “{s['recognized_text']}” (CER {_num(s.get('cer'))})" if s.get("recognized_text") else ""
        out.append(f"- “{s.get('text')}” — {stop}{heard}\n\n  <audio controls src=\"{url}\"></audio> "
                   f"([{s['file']}]({s['file']}))\n")
    return "\n".join(out)


def _limits_section(f: CardFacts) -> str:
    text = f.export_meta.get("text") or {}
    short = f.metrics.get("sample_stop_rate_short")
    licence = ("the weights derive from XTTS-v2 and carry the Coqui Public Model License: non-commercial use only."
               if f.base_is_xtts_v2 else
               f"the base model `{f.base_name}` is not XTTS-v2, so these weights are under that base model's "
               f"terms; the metadata keeps XTTS-v2's Coqui Public Model License (non-commercial) as the cautious "
               f"default.")
    short_line = (f"On this checkpoint's short evaluation texts the stop rate was {_num(short)}"
                  f" and the CER {_num(f.metrics.get('sample_cer_short'))}." if short is not None
                  else "This checkpoint's short texts were not measured separately.")
    return f"""## Known limits

- **Short texts** (a word or two) are where fine-tuned XTTS models most often babble past the end or
  cut the last word. {short_line} `python -m xtts_ft serve` guards against it (a fixed seed per request,
  a length cap per character, short pieces that miss the stop token generated again); the plain coqui
  lines below do not.
- **Length**: the model reads at most {text.get('char_limit', 'the configured')} characters of normalised
  text at a time; longer text must be split at sentence punctuation (`serve` does this).
- **Text front-end**: Amharic text must go through the project's normaliser (numbers as words,
  homophone folding {'on' if text.get('fold_homophones') else 'off'}), as in training; stock coqui-tts
  refuses language `{f.language}` and cannot normalise it, so plug in the tokenizer shown below.
- **Voice cloning** needs a clean 3-10 s reference clip; quality follows the training data's
  speakers and recording conditions.
- **Licence**: {licence}
"""


def _usage_section(f: CardFacts) -> str:
    lines = "\n".join(tokenizer_lines(Path(LOCAL_DIR), f.export_meta))
    return f"""## How to use

Download the folder, then serve it to any app that speaks OpenAI's `/v1/audio/speech`, or load it in Python.
The model speaks in the voice of a reference clip: put a clean 3-10 s recording of the voice in a folder
(`voices/narrator.wav` is the voice `narrator`).

```bash
hf download {f.repo_id} --local-dir {LOCAL_DIR}
# in a clone of the xtts-ft project: pip install -r requirements.txt && pip install --no-deps -e .
mkdir -p voices && cp my_recording.wav voices/{VOICE_EXAMPLE}.wav
python -m xtts_ft serve --model {LOCAL_DIR} --voices voices
curl -s http://127.0.0.1:{ServeConfig.port}/v1/audio/speech -H 'Content-Type: application/json' \\
  -d '{{"input": "ሰላም፣ እንዴት ነህ?", "voice": "{VOICE_EXAMPLE}", "response_format": "wav"}}' -o hello.wav
python -m xtts_ft synthesize --model {LOCAL_DIR} --text "ሰላም፣ እንዴት ነህ?" --speaker-wav voices/{VOICE_EXAMPLE}.wav --out hello.wav
```

Stock coqui-tts loads the folder; only the text front-end is the project's:

```python
from TTS.tts.configs.xtts_config import XttsConfig
from TTS.tts.models.xtts import Xtts

config = XttsConfig()
config.load_json("{LOCAL_DIR}/config.json")
model = Xtts.init_from_config(config)
model.load_checkpoint(config, checkpoint_dir="{LOCAL_DIR}", eval=True)
{lines}
```

`out["wav"]` is 24 kHz audio.
"""


def render_card(f: CardFacts, endpoint: str) -> ModelCard:
    """The :class:`huggingface_hub.ModelCard` (front matter from :class:`ModelCardData`)."""
    data = ModelCardData(
        language=f.language, license="other", license_name=LICENSE_NAME, license_link=LICENSE_LINK,
        base_model=BASE_MODEL if f.base_is_xtts_v2 else None, pipeline_tag="text-to-speech", library_name="coqui",
        tags=["xtts", "xtts-v2", "voice-cloning", "xtts-ft"] if f.base_is_xtts_v2 else ["xtts", "voice-cloning", "xtts-ft"],
    )
    meta = f.export_meta
    step = f" at training step {f.step}" if f.step is not None else ""
    tokens = (f"the GPT retrained with an extended vocabulary of {meta.get('text_tokens')} text tokens (fingerprint "
              f"`{meta.get('vocab_fingerprint')}`)")
    if f.base_is_xtts_v2:
        intro = (f"# {f.repo_id.split('/')[-1]}\n\n[{BASE_MODEL}](https://huggingface.co/{BASE_MODEL}) fine-tuned for "
                 f"language `{f.language}` with xtts-ft{step}: {tokens}; the speaker encoder and HiFi-GAN decoder "
                 f"are XTTS-v2's.\n")
    else:
        intro = (f"# {f.repo_id.split('/')[-1]}\n\nThe base model `{f.base_name}` fine-tuned for language "
                 f"`{f.language}` with xtts-ft{step}: {tokens}; the speaker encoder and HiFi-GAN decoder are that "
                 f"base model's. **The base model is not {BASE_MODEL}** (for instance the project's tiny random "
                 f"test model, which cannot speak).\n")
    body = "\n".join([intro, _quality_section(f), _data_section(f), _samples_section(f, endpoint),
                      _limits_section(f), _usage_section(f)])
    return ModelCard.from_template(data, template_str=CARD_TEMPLATE, body=body)
