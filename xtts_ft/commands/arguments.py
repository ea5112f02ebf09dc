"""Every command's options: one ``add_arguments``-style function per command, named after it.

Needs only the config package (defaults and help come from the schema, each fact once) and the
``--out`` option names of ``output_folder``: this module is what ``--help`` imports, and it loads
no torch, coqui, transformers, fastapi or gradio (tests/test_cli.py checks it in a fresh process).
The run functions live in the other modules of this package; cli.py imports the chosen one after
parsing.
"""

from __future__ import annotations

import argparse

from xtts_ft.config import RunConfig, ServeConfig, TextConfig, TokenizerConfig, field_choices, field_help
from xtts_ft.config.schema import DATASET_FORMATS
from xtts_ft.output_folder import ADD_HELP, ADD_OPTION, MOVE_ASIDE_HELP, MOVE_ASIDE_OPTION

Parser = argparse.ArgumentParser


def add_fold_argument(p: Parser, with_config: bool = False) -> None:
    default = "--config's, else " if with_config else ""
    p.add_argument("--fold-homophones", action=argparse.BooleanOptionalAction,
                   default=None if with_config else TextConfig.fold_homophones,
                   help=field_help(TextConfig, "fold_homophones") + f" (text.fold_homophones; default: {default}"
                   f"{TextConfig.fold_homophones})")


def add_old_content_arguments(p: Parser, add: bool = False) -> None:
    """What happens to what --out already holds (xtts_ft/output_folder.py); without an option: refused."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(MOVE_ASIDE_OPTION, dest="on_existing", action="store_const", const="move-aside",
                       default="refuse", help=MOVE_ASIDE_HELP)
    if add:
        group.add_argument(ADD_OPTION, dest="on_existing", action="store_const", const="add", help=ADD_HELP)


def add_config_arguments(p: Parser) -> None:
    p.add_argument("--config", required=True, help="Run config (YAML); see configs/.")
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="Override a config value, e.g. --set training.lr=1e-5."
    )
    p.add_argument("--resume", help="auto (latest checkpoint in the run dir), never, or a checkpoint folder.")
    p.add_argument("--max-steps", type=int, help="Shortcut for --set training.max_steps=N.")
    p.add_argument("--archive-old-run", action="store_true",
                   help="If the run folder holds another run's checkpoints (other data or settings, or --resume never), "
                        "move that run into <run.output_dir>/old_runs/<date>_<run id>/ and start this one (nothing is "
                        "deleted). Without it such a command is refused.")
    p.add_argument("--continue-with-new-data", action="store_true",
                   help="If the run folder's run was trained on other data (the dataset's transcripts or audio "
                        "changed, nothing else), continue that run on the new data with its checkpoints and "
                        "vocabulary. Without it such a command is refused.")
    p.add_argument("-v", "--verbose", action="store_true", help="Debug logging.")


# ---------------------------------------------------------------------------------------------
# headless_train.py, train, evaluate (run functions: commands/training.py)


def headless(p: Parser) -> None:
    add_config_arguments(p)
    p.add_argument("--evaluate", action="store_true", help="Only evaluate (samples + report) a checkpoint.")
    p.add_argument("--checkpoint", help="With --evaluate: the checkpoint folder (default: latest in the run dir).")


def train(p: Parser) -> None:
    add_config_arguments(p)


def launch(p: Parser) -> None:
    add_config_arguments(p)
    where = p.add_argument_group("where this machine stands (default: from the environment; see docs/gpus.md)")
    where.add_argument("--nnodes", type=int, help="Machines in the job (default: NUM_NODES, SLURM_NNODES, else 1).")
    where.add_argument("--node-rank", type=int, help="This machine's rank (default: NODE_RANK, SLURM_NODEID, else 0).")
    where.add_argument("--master-addr", help="The main machine's address (default: MASTER_ADDR, else the first "
                                             "host of SLURM_JOB_NODELIST).")
    where.add_argument("--master-port", type=int, help="Its port (default: MASTER_PORT, else 29500).")
    where.add_argument("--nproc-per-node", type=int,
                       help="Training processes on this machine (default: one per GPU; 1 without a GPU).")
    where.add_argument("--dry-run", action="store_true", help="Print the torchrun command and stop.")


def evaluate(p: Parser) -> None:
    add_config_arguments(p)
    p.add_argument("--checkpoint", help="Checkpoint folder (default: latest in the run dir).")
    p.set_defaults(evaluate=True)  # what headless_train.py's --evaluate says: the config checks read it first


# ---------------------------------------------------------------------------------------------
# data and text: prepare, tokenizer, normalize, transcribe, ingest (run functions: commands/data.py,
# text.py, vocab.py, recordings.py)


def prepare(p: Parser) -> None:
    p.add_argument("--input", required=True, help="Dataset root folder.")
    p.add_argument("--out", required=True, help="Output folder (metadata_*.csv, wavs/, report.json).")
    p.add_argument("--format", default="auto", choices=DATASET_FORMATS,
                   help="Dataset layout; hf: --input is a parquet/arrow file or folder, or a Hub dataset id.")
    p.add_argument("--audio-column", help="hf: the audio column (default: audio).")
    p.add_argument("--text-column", help="hf: the transcript column (default: text).")
    p.add_argument("--speaker-column", help="hf: a speaker column (default: none).")
    p.add_argument("--split", help="hf: the split to read (default: train).")
    p.add_argument("--config", help="Run config (YAML) whose dataset.* settings apply (its dataset.path and "
                                    "format are --input's and --format's), and text.fold_homophones; default: "
                                    "the schema's defaults.")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="Override a config value (with --config).")
    add_fold_argument(p, with_config=True)
    add_old_content_arguments(p)


def tokenizer(p: Parser) -> None:
    p.add_argument("--base-vocab", required=True, help="The base model's vocab.json.")
    p.add_argument("--text", required=True, nargs="+",
                   help="Amharic text files (one sentence per line), or folders of .txt files.")
    p.add_argument("--new-tokens", type=int, default=TokenizerConfig.new_tokens, help=field_help(TokenizerConfig, "new_tokens"))
    p.add_argument("--min-frequency", type=int, default=TokenizerConfig.min_frequency,
                   help=field_help(TokenizerConfig, "min_frequency"))
    p.add_argument("--eval-text", nargs="+", help="Held-out text files or folders: measured in the report, never trained on.")
    add_fold_argument(p)
    p.add_argument("--out", required=True, help="Output folder for vocab.json and report.json.")


def normalize(p: Parser) -> None:
    add_fold_argument(p)


def _audio_files_with_config(p: Parser, config_help: str, verb: str) -> None:
    """--config (its asr section names the recogniser), --set, and the audio files or folders to ``verb``."""
    p.add_argument("--config", required=True, help=config_help)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="Override a config value.")
    p.add_argument("audio", nargs="+", help=f"Audio files to {verb}, or folders of them (the audio files directly in "
                                            f"each folder, by name).")


def transcribe(p: Parser) -> None:
    _audio_files_with_config(p, "Run config (YAML) whose asr section names the recogniser.", "recognise")
    p.add_argument("--model", help="Recogniser repo id or folder instead of the config's asr.model.")


def assess(p: Parser) -> None:
    _audio_files_with_config(p, "Run config (YAML): asr.model hears the texts (with --texts).", "score")
    p.add_argument("--texts", help="path<TAB>text lines (as transcribe prints): each file's text, for tail_s and cer.")


def ingest(p: Parser) -> None:
    p.add_argument("audio", nargs="+", help="Long recordings, in reading order.")
    p.add_argument("--text", help="The text the recordings read (UTF-8): sentences are force-aligned to the audio.")
    p.add_argument("--subtitles", help="An .srt or .vtt file for the audio (not with --text): cues become clips, "
                                       "offsets corrected.")
    p.add_argument("--out", required=True, help="Output folder: metadata.csv, wavs/, segments.tsv, ingest_report.*")
    p.add_argument("--config", help="Run config (YAML): asr.model, dataset.min/max_duration_s, ingest.* "
                                    "(its dataset.path is not used); default: the schema's defaults.")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="Override a config value (with --config).")
    p.add_argument("--speaker", help="Speaker name in metadata.csv (default: dataset.speaker_name).")
    add_old_content_arguments(p, add=True)


# ---------------------------------------------------------------------------------------------
# models: synthesize, export, score, make-random-model, serve, publish, ui (run functions: commands/models.py)


def synthesize(p: Parser) -> None:
    p.add_argument("--model", required=True, help="An export folder, or a checkpoint folder (then --base-model).")
    p.add_argument("--text", required=True, help="Text to speak (Amharic).")
    p.add_argument("--speaker-wav", required=True, help="Reference clip of the voice (3-10 s).")
    p.add_argument("--out", required=True, help="Output WAV path.")
    p.add_argument("--base-model", help="Base model folder or repo id (only for a checkpoint folder).")
    add_device_argument(p)


def add_device_argument(p: Parser, what: str = "") -> None:
    """--device of the commands that speak (serve, synthesize, ui): xtts_ft/speech_device.py."""
    p.add_argument("--device", help=f"Where the model speaks{what}: auto (default: cuda when available, else cpu, "
                                    "also on a Mac), cpu, cuda, cuda:N, or mps (Apple's GPU, fp32; operators it "
                                    "lacks run on the CPU).")


def export(p: Parser) -> None:
    p.add_argument("--checkpoint", required=True, help="Checkpoint folder (runs/<name>/checkpoints/step_XXXXXX).")
    p.add_argument("--out", required=True, help="Output folder.")
    p.add_argument("--base-model", help="Base model folder or repo id (default: the one the run used).")
    add_old_content_arguments(p)


def score(p: Parser) -> None:
    p.add_argument("--model", required=True, help="An export folder, or a checkpoint folder.")
    p.add_argument("--config", required=True, help="Run config (YAML): evaluation.sentences and asr.model.")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="Override a config value.")
    p.add_argument("--speaker-wav", action="append", help="Reference clip of the voice (default: evaluation.speaker_wavs).")
    p.add_argument("--out", help="Folder to keep the samples in (default: a temporary folder, removed at the end).")
    p.add_argument("--base-model", help="Base model folder or repo id (only for a checkpoint folder).")


def ui(p: Parser) -> None:
    p.add_argument("--run", default=RunConfig.output_dir,
                   help="Run folder the page opens on (default: %(default)s, run.output_dir's default).")
    p.add_argument("--host", default="127.0.0.1", help="Address to listen on (default: %(default)s; 0.0.0.0 for all).")
    p.add_argument("--port", type=int, default=7860, help="Port (default: %(default)s).")
    p.add_argument("--auth", metavar="USER:PASS", help="Ask for this user name and password before showing the page.")
    p.add_argument("--root-path", help="The URL path the app is served under behind a proxy, e.g. /proxy/7860 "
                                       "(default: Gradio's GRADIO_ROOT_PATH, else none).")
    p.add_argument("--config", help="Config the Train tab starts from (default: the run's own, else configs/*.yaml).")
    add_device_argument(p, " in the Speak tab")


STREAM_SETTINGS = ("max_active_streams", "stream_first_chunk_codes", "stream_chunk_codes", "vocoder_batch")  # ServeConfig
PRECISION_SETTINGS = ("decode_precision", "vocoder_precision", "decode_graphs", "vocoder_stream", "decode_overlap",
                      "warm_up")  # on CUDA


def serve(p: Parser) -> None:
    p.add_argument("--model", required=True, help="An export folder, a checkpoint folder, or a run folder (its best "
                                                  "checkpoint, else its latest).")
    p.add_argument("--host", default=ServeConfig.host, help=field_help(ServeConfig, "host") + " (default: %(default)s)")
    p.add_argument("--port", type=int, default=ServeConfig.port, help=field_help(ServeConfig, "port"))
    p.add_argument("--api-key", help="Require 'Authorization: Bearer KEY' on /v1/ (default: $XTTS_FT_API_KEY; none).")
    p.add_argument("--voices", help="Folder of reference clips (WAV/FLAC/MP3), one voice per file named after it; "
                                    "uploads are saved there too. The run's own speakers are offered as well.")
    add_device_argument(p)
    p.add_argument("--wyoming", metavar="tcp://HOST:PORT", help="Also speak the Wyoming protocol (Home Assistant).")
    p.add_argument("--base-model", help="Base model folder or repo id (checkpoint or run folder; default: the one "
                                        "its checkpoint record names).")
    p.add_argument("--max-codes", type=int, help="Cap audio codes per piece below the model's limit (~21.5 per "
                                                 "second; random test models never stop).")
    for name in STREAM_SETTINGS:
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(ServeConfig, name),
                       help=field_help(ServeConfig, name) + " (default: %(default)s)")
    for name in PRECISION_SETTINGS:
        p.add_argument(f"--{name.replace('_', '-')}", choices=field_choices(ServeConfig, name),
                       default=getattr(ServeConfig, name), help=field_help(ServeConfig, name) + " (default: %(default)s)")


def publish(p: Parser) -> None:
    p.add_argument("--model", required=True, help="An export folder, a checkpoint folder or a run folder (its best checkpoint).")
    p.add_argument("--repo-id", required=True, help="OWNER/NAME of the Hub model repo (created if absent).")
    p.add_argument("--private", action="store_true", help="Create the repo private (an existing repo keeps its setting).")
    p.add_argument("--dry-run", action="store_true", help="Write the folder with the card, upload nothing.")
    p.add_argument("--out", help="The folder to write and upload (default: hub_upload/NAME).")
    p.add_argument("--base-model", help="Base model folder or repo id (a checkpoint or run; default: the run's).")


def make_random_model(p: Parser) -> None:
    p.add_argument("--size", choices=["tiny", "full"], default="tiny",
                   help="tiny: trains in seconds (demo, tests); full: the real XTTS-v2 dimensions (~2.1 GB on disk).")
    make_tiny_model(p)


def make_tiny_model(p: Parser) -> None:
    p.add_argument("--out", required=True, help="Output folder.")
    p.add_argument("--seed", type=int, default=0, help="Seed of the random weights.")
    add_old_content_arguments(p)
