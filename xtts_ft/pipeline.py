"""The whole run, top to bottom: prepare data -> build tokenizer -> train -> evaluate.

``run_pipeline`` is what ``python headless_train.py --config X`` does. Each stage writes into
its own folder of the run directory and is skipped on a re-run when its inputs did not change
(see ``xtts_ft.stages``); training resumes from the latest checkpoint by itself. Before any of it,
the run folder is locked for this trainer's lifetime (``xtts_ft.run_lock``: a second trainer is refused)
and claimed (``xtts_ft.run_folder``): a command that would mix two runs in one folder
is refused there, before data, vocabulary or codes of the earlier run are touched.

The whole run notices a stop request (SIGINT/SIGTERM, ``xtts_ft.stop_signals``): prepare between
clips, every other stage when it ends, training and evaluation within seconds. A stop outside the
training loop abandons what is left (each stage's finished work is kept: prepare's per-clip results,
a finished stage's folder), prints the command that continues and returns ``stopped_by_signal``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from xtts_ft import stages
from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.assess.listener import sample_listener
from xtts_ft.base_model import BaseModelFiles
from xtts_ft.checkpoint_store import CheckpointRecord, CheckpointStore
from xtts_ft.config import Config, DatasetConfig, dump_config
from xtts_ft.data import prepare_dataset, read_metadata
from xtts_ft.data.multi import prepare_datasets
from xtts_ft.evaluate import make_eval_hook, write_report
from xtts_ft.evaluate.export import export_from_checkpoint
from xtts_ft.evaluate.intelligibility import load_eval_recognizer
from xtts_ft.evaluate.languages import language_evals
from xtts_ft.evaluate.references import pick_references
from xtts_ft.ingest.short_pieces import ShortPieceMaker
from xtts_ft.json_types import JsonObject
from xtts_ft.layout import EVAL_CSV, STAGE_REPORT, TRAIN_CSV, VOCAB_FILE, RunLayout
from xtts_ft.model import describe_vocab
from xtts_ft.output_folder import MOVE_ASIDE
from xtts_ft.random_model import resolve_or_create_base_model
from xtts_ft.run_folder import RunRecord, claim_run_folder, record_fingerprint, run_fingerprint
from xtts_ft.run_lock import RunLock
from xtts_ft.stop_report import report_stop
from xtts_ft.stop_signals import StopRequested, StopSignals, raise_if_stopped
from xtts_ft.tempfiles import atomic_write
from xtts_ft.text import NORMALIZER_VERSION
from xtts_ft.text_settings import TextSettings, make_normalizer
from xtts_ft.tokenizer import build_extended_vocab, vocab_fingerprint
from xtts_ft.tokenizer.command import read_text_lines, text_files_in
from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer, make_tokenizer
from xtts_ft.train import TrainResult, train
from xtts_ft.train.distributed import DistContext, MainFirst, cleanup_distributed, peer_failures, setup_distributed
from xtts_ft.train.dvae_stage import DvaeStageResult, dvae_stage
from xtts_ft.train.hooks import EvalHook
from xtts_ft.train.machine_folders import check_same_inputs, claim_machine_folders, dvae_for_every_machine, write_token
from xtts_ft.train.resume import check_vocab
from xtts_ft.train.session import RunHandles, TrainInputs
from xtts_ft.train.stopping import CommandLine, continue_command

log = logging.getLogger(__name__)


#: The fields of TrainResult that summary.json carries (with the run's folders and the stages' outputs).
SUMMARY_TRAINING_FIELDS = ("last_checkpoint", "best_checkpoint", "first_eval_loss", "final_eval_loss", "best_step",
                           "stopped_early", "overfit_warning")


@dataclass
class PipelineResult:
    run_dir: Path
    data_dir: Path
    vocab_path: Path
    training: Optional[TrainResult] = None  # what training returned; None when it did not run
    stopped_before_training: bool = False  # a stop in a stage before training (training's own: training.stopped_...)
    samples_dir: Optional[Path] = None
    report: Optional[Path] = None
    best_export: Optional[Path] = None  # training.export_best_at_end: the best checkpoint exported
    dvae: Optional[JsonObject] = None  # the DVAE stage (dvae.finetune): dvae.pth, held-out reconstruction loss before/after

    @property
    def stopped_by_signal(self) -> bool:
        return self.stopped_before_training or (self.training is not None and self.training.stopped_by_signal)

    def summary(self) -> JsonObject:
        """summary.json: the run's folders, how it ended, and what training returned (its data reports aside)."""
        trained = dataclasses.asdict(self.training) if self.training is not None else {}
        out = {"run_dir": self.run_dir, "data_dir": self.data_dir, "vocab_path": self.vocab_path,
               **{key: trained.get(key) for key in SUMMARY_TRAINING_FIELDS},
               "stopped_early": bool(trained.get("stopped_early", False)), "stopped_by_signal": self.stopped_by_signal,
               "samples_dir": self.samples_dir, "report": self.report, "best_export": self.best_export, "dvae": self.dvae}
        return {key: str(value) if isinstance(value, Path) else value for key, value in out.items()}


def prepare_stage(cfg: Config, base: BaseModelFiles) -> Path:
    """Dataset -> run_dir/data (metadata_train.csv, metadata_eval.csv, wavs/, report.*)."""

    data_dir = RunLayout(cfg.run_dir).data
    key = stages.hash_inputs(
        "prepare-v1", NORMALIZER_VERSION, dataclasses.asdict(cfg.dataset), dataclasses.asdict(cfg.text),
        _source_stats(cfg.dataset),
    )
    if cfg.more_datasets:  # only with a dataset list: a one-dataset run keeps its key (and its prepared data)
        more = [(dataclasses.asdict(d), _source_stats(d)) for d in cfg.more_datasets]
        key = stages.hash_inputs(key, cfg.run.language, more)
    checked = any(d.transcript_check is not None for d in cfg.datasets)
    pieces = any(d.short_clips != "off" for d in cfg.datasets)  # short pieces are cut where the recogniser aligns
    hears = checked or cfg.evaluation.recognize  # the run loads asr.model anyway: short_clips auto may use it
    if checked or pieces:  # a different recogniser hears differently
        key = stages.hash_inputs(key, dataclasses.asdict(cfg.asr))
    if pieces:
        key = stages.hash_inputs(key, dataclasses.asdict(cfg.ingest), hears)
    if stages.is_current(data_dir, key, [TRAIN_CSV, EVAL_CSV, STAGE_REPORT]):
        log.info("prepare: dataset unchanged, reusing %s", data_dir)
        return data_dir
    recognizer = None
    if checked:

        recognizer = Recognizer.from_config(cfg.asr)
    # loaded only when a dataset has too few short clips (the transcript check's recogniser when there is one);
    # auto does not make a run download a recogniser it would not load anyway
    maker = ShortPieceMaker(cfg.ingest, lambda: recognizer or Recognizer.from_config(cfg.asr), None if hears else
                            "asr.model is not used by this run (evaluation.recognize off, no dataset.transcript_check)"
                            "; set dataset.short_clips to a share, e.g. 0.1, to make them") if pieces else None
    normalizer = make_normalizer(cfg.text.fold_homophones)
    if cfg.more_datasets:

        report = prepare_datasets(
            [(d, cfg.dataset_language(d)) for d in cfg.datasets], data_dir, cfg.run.language,
            normalizer=normalizer, recognizer=recognizer, piece_maker=maker,
        )
    else:
        report = prepare_dataset(cfg.dataset, data_dir, normalizer=normalizer, recognizer=recognizer,
                                 piece_maker=maker)
    for line in report.summary_lines():
        log.info("prepare: %s", line)
    stages.mark_done(data_dir, key, kept=report.kept, rejected=report.rejected)
    return data_dir


def _source_stats(ds: DatasetConfig) -> list[tuple[str, int, int]]:
    """Size and mtime of a dataset's files (a folder's tree, one parquet/arrow file; a Hub id: none)."""
    path = Path(ds.path)
    return stages.file_stats([path]) if path.is_file() else stages.tree_stats(path)


def tokenizer_stage(cfg: Config, base: BaseModelFiles, data_dir: Path, keep_existing: bool = False) -> Path:
    """Base vocab + training transcripts (+ extra text) -> run_dir/tokenizer/vocab.json.

    ``keep_existing`` (``--continue-with-new-data``): the run's vocabulary stays as it is, whatever the data now
    says; its checkpoints' token ids keep their meaning.
    """

    tok_dir = RunLayout(cfg.run_dir).tokenizer
    train_csv, eval_csv = data_dir / TRAIN_CSV, data_dir / EVAL_CSV
    extra = text_files_in([Path(f) for f in cfg.tokenizer.extra_text_files])
    key = stages.hash_inputs(
        "tokenizer-v1",
        NORMALIZER_VERSION,
        dataclasses.asdict(cfg.tokenizer),
        dataclasses.asdict(cfg.text),
        vocab_fingerprint(base.vocab_json),
        stages.file_stats([train_csv, eval_csv, *extra]),
    )
    if stages.is_current(tok_dir, key, [VOCAB_FILE, STAGE_REPORT]):
        log.info("tokenizer: inputs unchanged, reusing %s", tok_dir / VOCAB_FILE)
        return tok_dir / VOCAB_FILE
    if keep_existing and (tok_dir / VOCAB_FILE).is_file():
        log.warning("tokenizer: keeping the run's vocabulary %s for the changed data (--continue-with-new-data); "
                    "clips with text it cannot encode are reported when training loads them", tok_dir / VOCAB_FILE)
        stages.mark_done(tok_dir, key, fingerprint=vocab_fingerprint(tok_dir / VOCAB_FILE))
        return tok_dir / VOCAB_FILE
    # the new tokens are learnt from the run's own language only (replay clips of base languages keep their tokens)
    own = cfg.run.language
    texts = [row["text"] for row in read_metadata(train_csv) if row.get("language", own) == own]
    for path in extra:
        texts.extend(read_text_lines(path))
    eval_texts = [row["text"] for row in read_metadata(eval_csv) if row.get("language", own) == own]
    report = build_extended_vocab(
        base.vocab_json,
        texts,
        cfg.tokenizer.new_tokens,
        tok_dir,
        min_frequency=cfg.tokenizer.min_frequency,
        normalizer=make_normalizer(cfg.text.fold_homophones),
        eval_texts=eval_texts,
    )
    log.info(
        "tokenizer: %d new tokens (vocab %d -> %d), %.3f tokens/char on train text, fingerprint %s",
        report.new_tokens_added, report.base_vocab_size, report.vocab_size, report.train_tokens_per_char,
        report.fingerprint,
    )
    stages.mark_done(tok_dir, key, fingerprint=report.fingerprint)
    return tok_dir / VOCAB_FILE


def base_vocab_size(base: BaseModelFiles) -> int:

    return describe_vocab(base.vocab_json)


def run_pipeline(cfg: Config, *, train_model: bool = True, archive_old_run: bool = False,
                 command_line: Optional[CommandLine] = None, new_data: bool = False) -> PipelineResult:
    """Run every stage for ``cfg``; returns where the outputs are.

    ``archive_old_run``: move another run's outputs in the folder aside instead of refusing (``--archive-old-run``);
    ``command_line`` (prefix, arguments): how this run was started, for the resume command printed after a stop;
    ``new_data``: when only the dataset changed, continue the run on it with its vocabulary (``--continue-with-new-data``).
    Under ``torchrun`` every stage that writes files (run folder claim, base model, prepare, tokenizer, report)
    runs on rank 0 while the other ranks wait, then reads rank 0's outputs (``MainFirst``).
    """

    ctx = setup_distributed(cfg.run.device)
    # rank 0 takes it before the claim, and holds it until the run ends; so does the local rank 0 of a machine
    # whose run folder is its own (train/machine_folders.py)
    lock = RunLock(cfg.run_dir)
    try:
        # under torchrun: another rank's failure ends this one in one line; this one's is told to the others
        with peer_failures(ctx), StopSignals.shared() as signals:
            try:
                return _run_stages(cfg, MainFirst(ctx), lock, train_model=train_model,
                                   archive_old_run=archive_old_run, command_line=command_line, new_data=new_data)
            except StopRequested as stop:  # noticed outside the training loop (which handles its own)
                return _stopped_before_training(cfg, str(stop), signals.signal_name, command_line, ctx.is_main)
    finally:
        lock.release()
        cleanup_distributed(ctx)


def _stopped_before_training(cfg: Config, where: str, signal_name: Optional[str], command_line: Optional[CommandLine],
                             is_main: bool) -> PipelineResult:
    """A stop in prepare, the tokenizer or another stage before training: say so, and how to continue."""

    run_dir, layout = cfg.run_dir, RunLayout(cfg.run_dir)
    if is_main:
        hint = continue_command(command_line, cfg.checkpoint.resume, run_dir, None)
        claimed = layout.run_file.is_file()  # before the claim the folder may be another run's
        report_stop(where, signal_name, hint, run_dir=run_dir if claimed else None)
    return PipelineResult(run_dir=run_dir, data_dir=layout.data, vocab_path=layout.tokenizer / VOCAB_FILE,
                          stopped_before_training=True)


def _run_stages(cfg: Config, main_first: MainFirst, lock: RunLock, *, train_model: bool, archive_old_run: bool,
                command_line: Optional[CommandLine], new_data: bool = False) -> PipelineResult:

    run_dir, is_main = cfg.run_dir, main_first.ctx.is_main
    # rank 0's: a named checkpoint lies on rank 0's disk, which other machines may not see
    resume_from = main_first.share("checkpoint.resume", lambda: _named_checkpoint(cfg))
    fingerprint, record = run_fingerprint(cfg), None
    token = ""
    if is_main:
        # only rank 0 locks and claims (and may archive); a refusal there stops every rank (MainFirst)
        def lock_and_claim() -> tuple[RunRecord, str]:
            lock.acquire()  # before anything is written (the claim may archive an old run)
            claimed = claim_run_folder(run_dir, fingerprint=fingerprint, resume=cfg.checkpoint.resume,
                                       archive=archive_old_run, new_data=new_data)
            return claimed, write_token(run_dir) if main_first.ctx.enabled else ""

        record, token = main_first.run("run folder", lock_and_claim)
        dump_config(cfg, RunLayout(run_dir).config)
    else:
        main_first.run("run folder", lambda: None)
    # whose checkpoints are this run's, and rank 0's token: the machines that read it share its folder
    record, token = main_first.ctx.broadcast_object((record, token))
    folders = claim_machine_folders(main_first, run_dir, token, lock) if main_first.ctx.enabled else None
    if folders is not None:  # a machine with a folder of its own runs each stage alongside rank 0, not after it
        main_first.own_folder = not folders.shared[main_first.ctx.rank]
    raise_if_stopped("the run folder check")
    base = main_first.run("base model", lambda: resolve_or_create_base_model(cfg.base_model))
    raise_if_stopped("the base model check")
    data_dir = main_first.run("prepare", lambda: prepare_stage(cfg, base))
    raise_if_stopped("prepare")  # its work is kept: the next run reuses every finished clip
    vocab_path = main_first.run("tokenizer", lambda: tokenizer_stage(cfg, base, data_dir, keep_existing=new_data))
    raise_if_stopped("the tokenizer")
    handles = training_handles(cfg, main_first.ctx, vocab_path, _claimed(record),
                               own_folder=main_first.own_folder) if train_model else None
    if folders is not None:  # machines with a folder of their own made their data and vocabulary themselves
        check_same_inputs(main_first, folders, data_dir,
                          handles.vocab_fingerprint if handles is not None else vocab_fingerprint(vocab_path),
                          str(cfg.dataset.path))
    if resume_from is not None:  # before the recogniser, model and data load: a named checkpoint of another

        fingerprint_now = handles.vocab_fingerprint if handles is not None else vocab_fingerprint(vocab_path)
        check_vocab(resume_from[1].vocab_fingerprint, resume_from[0], fingerprint_now, cfg)
    result = PipelineResult(run_dir=run_dir, data_dir=data_dir, vocab_path=vocab_path)
    if handles is None:  # train_model off
        return result

    def run_dvae_stage() -> Optional[DvaeStageResult]:
        return dvae_stage(cfg, base, data_dir)  # None unless dvae.finetune

    if folders is not None and not folders.all_shared and cfg.dvae.finetune:  # rank 0's DVAE on every machine
        dvae = dvae_for_every_machine(main_first, folders, run_dir, run_dvae_stage)
    else:
        dvae = main_first.run("dvae", run_dvae_stage)
    if dvae is not None:  # the GPT stage, its code cache, checkpoints and export use the fine-tuned DVAE
        base = dataclasses.replace(base, dvae_pth=dvae.dvae_pth)
        result.dvae = dvae.to_dict()
    raise_if_stopped("the DVAE stage")

    eval_hook = make_eval_hook_for(cfg, run_dir, vocab_path, data_dir, tokenizer=handles.tokenizer) if is_main else None
    inputs = TrainInputs(base=base, vocab_path=vocab_path, base_vocab_size=base_vocab_size(base),
                         train_csv=data_dir / TRAIN_CSV, eval_csv=data_dir / EVAL_CSV, run_dir=run_dir,
                         eval_hook=eval_hook, command_line=command_line)
    outcome = train(cfg, inputs, handles=handles)
    if is_main:
        record_fingerprint(run_dir, fingerprint)  # trained with these settings (adopted folders learn them here)
    result.training = outcome
    if is_main and cfg.training.export_best_at_end and outcome.best_checkpoint is not None \
            and not outcome.stopped_by_signal:
        result.best_export = _export_best(outcome.best_checkpoint, run_dir, base)
    result.samples_dir = RunLayout(run_dir).samples
    result.report = RunLayout(run_dir).report
    if is_main:
        result.report = write_report(run_dir)
        atomic_write(RunLayout(run_dir).summary, json.dumps(result.summary(), indent=2, default=str))
    return result


def _export_best(checkpoint: Path, run_dir: Path, base: BaseModelFiles) -> Path:
    """``training.export_best_at_end``: the best checkpoint -> ``exports/step_NNNNNN`` (an older one moved aside)."""

    out = RunLayout(run_dir).exports / checkpoint.name
    path = export_from_checkpoint(checkpoint, out, base, on_existing=MOVE_ASIDE)
    log.info("best checkpoint %s exported to %s", checkpoint, path)
    return path


def _named_checkpoint(cfg: Config) -> Optional[tuple[Path, CheckpointRecord]]:
    """``checkpoint.resume: PATH``: verified (sha256) before any heavy work, with its record; else None."""
    if cfg.checkpoint.resume in ("auto", "never"):
        return None
    path = Path(cfg.checkpoint.resume)
    return path, CheckpointStore.verify(path)


def make_eval_hook_for(cfg: Config, run_dir: Path, vocab_path: Path, data_dir: Path,
                       tokenizer: Optional[AmharicTokenizer] = None) -> EvalHook:
    """The sample-synthesis hook the trainer calls after each evaluation (``tokenizer``: the run's, else built)."""

    tokenizer = tokenizer or make_tokenizer(vocab_path, TextSettings.from_config(cfg))
    refs = pick_references(cfg.evaluation, data_dir, cfg.run.language)
    recognizer = load_eval_recognizer(cfg)
    return make_eval_hook(
        cfg, run_dir, tokenizer, refs.speaker_wavs, refs.eval_clips, refs.seconds_per_char_range,
        recognizer=recognizer, languages=language_evals(cfg, data_dir),  # CER per language
        listener=sample_listener(cfg, recognizer),  # predicted quality, speech after the text
    )


def _claimed(record: Optional[RunRecord]) -> RunRecord:
    """Rank 0's run record as every rank received it: rank 0 claims the folder before it sends it, so it is there."""
    if record is None:
        raise RuntimeError("the run record was not shared: rank 0 sends it after claiming the run folder")
    return record


def training_handles(cfg: Config, dist: DistContext, vocab_path: Path, record: RunRecord,
                     tokenizer: Optional[AmharicTokenizer] = None, own_folder: bool = False) -> RunHandles:
    """What the recipe gets from the command: the distributed handle, the run folder's record, the tokenizer
    (built here once, unless a test gives a ready one), the vocabulary's fingerprint, and whether this rank's
    machine keeps a run folder of its own."""

    tokenizer = tokenizer or make_tokenizer(vocab_path, TextSettings.from_config(cfg))
    return RunHandles(dist=dist, run=record, tokenizer=tokenizer, vocab_fingerprint=vocab_fingerprint(vocab_path),
                      own_folder=own_folder)


def run_training(cfg: Config, inputs: TrainInputs, *, tokenizer: Optional[AmharicTokenizer] = None) -> TrainResult:
    """The training stage alone on prepared data (tests, benchmarks): what ``run_pipeline`` sets up before training
    (distributed handle, the run-folder claim without a fingerprint, the tokenizer), then ``xtts_ft.train.train``."""

    ctx = setup_distributed(cfg.run.device)
    lock = RunLock(inputs.run_dir)
    try:
        with peer_failures(ctx):  # as run_pipeline
            record = None
            if ctx.is_main:
                lock.acquire()
                record = claim_run_folder(Path(inputs.run_dir), fingerprint=None, resume=cfg.checkpoint.resume)
            handles = training_handles(cfg, ctx, inputs.vocab_path, _claimed(ctx.broadcast_object(record)), tokenizer)
            return train(cfg, inputs, handles=handles)
    finally:
        lock.release()
        cleanup_distributed(ctx)
