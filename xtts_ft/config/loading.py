"""Reading a run config: YAML, ``--set`` overrides, type checks, and one error listing every problem.

``load_config`` reads YAML with ``yaml.safe_load``, applies ``--set key.sub=value`` overrides,
checks every key and type against the schema (:mod:`xtts_ft.config.schema`), runs each section's
own checks and the checks across sections, and raises one :class:`ConfigError` listing every
problem, one line each, naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence, Union

import yaml

from xtts_ft.config.schema import LANGUAGE_ALIASES, Config, DatasetConfig, is_local_source
from xtts_ft.errors import ConfigError
from xtts_ft.tempfiles import atomic_write

log = logging.getLogger(__name__)

#: The configs shipped with the project (configs/ next to the package), where a bare ``--config NAME.yaml`` is
#: also looked for: the README's ``python headless_train.py --config amharic.yaml`` works from any folder.
PROJECT_CONFIGS = Path(__file__).resolve().parents[2] / "configs"

_YAML11_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any) -> tuple[bool, Any]:
    """Return (ok, value) with value converted where YAML is looser than the schema (int -> float)."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        word = {True: "on", False: "off"}.get(value) if isinstance(value, bool) else None
        if word in typing.get_args(tp):
            return True, word  # YAML 1.1 reads a bare on/off (and yes/no) as true/false: the setting's own word
        return (value in typing.get_args(tp), value)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            ok, v = _coerce(value, arg)
            if ok:
                return True, v
        return False, value
    if origin is list:
        if not isinstance(value, list):
            return False, value
        (item_tp,) = typing.get_args(tp)
        out = []
        for item in value:
            ok, v = _coerce(item, item_tp)
            if not ok:
                return False, value
            out.append(v)
        return True, out
    if tp is type(None):
        return value is None, value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, float(value)
        if isinstance(value, str) and _YAML11_FLOAT.match(value.strip()):
            return True, float(value)  # YAML 1.1 reads 1e-5 (no dot) as a string
        return False, value
    if tp is str:
        return isinstance(value, str), value
    raise TypeError(f"schema type {tp!r} not supported")  # a bug in this file, not user input


def _did_you_mean(key: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(key, choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _build_section(cls: type, raw: Any, where: str, problems: list[str]) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a mapping of keys, got {type(raw).__name__}")
        return cls()
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in raw.items():
        if key not in names:
            problems.append(f"{where}.{key}: unknown key{_did_you_mean(str(key), names)}")
            continue
        if dataclasses.is_dataclass(hints[key]):  # a sub-section, e.g. training.early_stopping
            values[key] = _build_section(hints[key], value, f"{where}.{key}", problems)
            continue
        if _is_section_map(hints[key]):  # named sub-sections, e.g. asr.per_language.en
            values[key] = _build_section_map(typing.get_args(hints[key])[1], value, f"{where}.{key}", problems)
            continue
        ok, coerced = _coerce(value, hints[key])
        refused = getattr(cls, "REFUSED", {}).get((key, str(value).strip().lower()))
        if refused:  # a value people try, refused with why and what to do instead
            problems.append(f"{where}.{key}: {value}: {refused}")
            continue
        if not ok:
            problems.append(f"{where}.{key}: expected {_type_name(hints[key])}, got {value!r}")
            continue
        values[key] = coerced
    return cls(**values)


def _is_section_map(tp: Any) -> bool:
    """``dict[str, SomeSection]``: a mapping of names to sub-sections of one kind."""
    return typing.get_origin(tp) is dict and dataclasses.is_dataclass(typing.get_args(tp)[1])


def _build_section_map(cls: type, raw: Any, where: str, problems: list[str]) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a mapping of names to sections, got {type(raw).__name__}")
        return {}
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if not isinstance(value, dict):  # one problem for it, not a second one about its empty fields
            problems.append(f"{where}.{name}: expected a mapping of keys, got {type(value).__name__}")
            continue
        out[str(name)] = _build_section(cls, value, f"{where}.{name}", problems)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """``training.lr=1e-5`` -> (['training', 'lr'], 1e-05); the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set {text}: expected key.sub=value, e.g. --set training.lr=1e-5")
    key, _, value = text.partition("=")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        parsed = value
    return key.strip().split("."), parsed


# (section, key given, the setting it needs, test on the built config, what that setting is now)
_NEEDS = [
    ("training", "step_every", "training.lr_schedule: step", lambda c: c.training.lr_schedule == "step",
     lambda c: f"training.lr_schedule is '{c.training.lr_schedule}'"),
    ("training", "step_gamma", "training.lr_schedule: step", lambda c: c.training.lr_schedule == "step",
     lambda c: f"training.lr_schedule is '{c.training.lr_schedule}'"),
    ("training", "min_lr_ratio", "training.lr_schedule: cosine", lambda c: c.training.lr_schedule == "cosine",
     lambda c: f"training.lr_schedule is '{c.training.lr_schedule}'"),
    ("training", "grad_accum_steps", "training.effective_batch_size: null",
     lambda c: c.training.effective_batch_size is None,
     lambda c: f"training.effective_batch_size {c.training.effective_batch_size} derives it"),
    ("base_model", "revision", "base_model.source as a Hugging Face repo id", lambda c: not is_local_source(c.base_model.source),
     lambda c: f"'{c.base_model.source}' is a local folder"),
]


def _build_datasets(raw: Any, problems: list[str]) -> tuple[DatasetConfig, list[DatasetConfig]]:
    """`dataset:` as one mapping (as always) or a list of them; each entry's problems name `dataset[i].key`."""
    if not isinstance(raw, list):
        return _build_section(DatasetConfig, raw, "dataset", problems), []
    if not raw:
        problems.append("dataset: the list is empty; give at least one dataset (path, format, language)")
        return DatasetConfig(), []
    built = []
    for i, item in enumerate(raw):
        found: list[str] = []
        built.append(_build_section(DatasetConfig, item, f"dataset[{i}]", found))
        built[-1].check(found)
        problems.extend(re.sub(r"^dataset\.", f"dataset[{i}].", p) for p in found)
    return built[0], built[1:]


def _check_datasets(cfg: Config, listed: bool, problems: list[str]) -> None:
    """Checks across datasets: one in the run's language, distinct paths."""
    langs = [cfg.dataset_language(d) for d in cfg.datasets]
    if cfg.run.language in LANGUAGE_ALIASES and LANGUAGE_ALIASES[cfg.run.language] not in langs:
        where = "dataset[*].language" if listed else "dataset.language"
        problems.append(f"{where}: no dataset is in run.language '{cfg.run.language}'; the run needs clips of the "
                        f"language it learns (other languages only mix in)")
    for i, d in enumerate(cfg.datasets):
        if d.transcript_check is not None and cfg.dataset_language(d) != cfg.run.language:
            where = f"dataset[{i}]" if listed else "dataset"
            problems.append(f"{where}.transcript_check: the recogniser (asr.model) hears {cfg.run.language}, not "
                            f"'{cfg.dataset_language(d)}'; set it to null for this dataset")
    run = LANGUAGE_ALIASES.get(cfg.run.language, cfg.run.language)
    for code in cfg.asr.per_language:
        if LANGUAGE_ALIASES.get(code, code) == run:
            problems.append(f"asr.per_language.{code}: '{code}' is the run's language, whose recogniser is asr.model; "
                            f"remove this entry or set asr.model")
        elif code not in langs:
            problems.append(f"asr.per_language.{code}: no dataset is in '{code}' (the run's datasets are in "
                            f"{', '.join(sorted(set(langs)))}); remove it or add that language's dataset")
    seen: dict[tuple[str, str, str], int] = {}
    for i, d in enumerate(cfg.datasets):
        key = (d.path, d.format, d.hf_split)
        if listed and key in seen:
            problems.append(f"dataset[{i}].path: '{d.path}' is already dataset[{seen[key]}]; list each dataset once")
        seen.setdefault(key, i)


def _unmet_needs(raw: dict[str, Any], cfg: Config) -> list[str]:
    """Options set in the file that nothing reads with the other settings as they are (never silently ignored)."""
    out = []
    for section, key, needs, met, now in _NEEDS:
        # set to something other than its default: a resolved config.yaml lists every key and stays loadable
        given = isinstance(raw.get(section), dict) and raw[section].get(key) is not None
        default = next(f for f in dataclasses.fields(typing.get_type_hints(Config)[section]) if f.name == key).default
        if given and getattr(getattr(cfg, section), key) != default and not met(cfg):
            out.append(f"{section}.{key}: only used with {needs}, but {now(cfg)}; remove it or change that setting")
    return out


def _labelled(problem: str, source: str, given: Sequence[tuple[str, str]]) -> str:
    """``problem`` ("training.lr: expected float ...") named after where its key was set: the command line's words
    for a key set there (``--set training.lr=fast: expected float ...``), else the config file."""
    for key, label in given:
        if problem.startswith(f"{key}: "):
            return f"{label}: {problem[len(key) + 2:]}"
        if problem.startswith((f"{key}.", f"{key}[")):  # a key below the one given, e.g. --set training={...}
            return f"{label}: {problem}"
    return f"{source}: {problem}"


def _problem_key(override: str) -> str:
    """The key an override sets, spelt as problems name it (``dataset.1.path`` -> ``dataset[1].path``)."""
    return re.sub(r"^dataset\.(\d+)(?=\.|$)", r"dataset[\1]", ".".join(parse_override(override)[0]))


def _recognisers_missing(cfg: Config) -> list[str]:
    """asr.model (and asr.per_language.*) written as a folder that does not exist, in a run that loads it: said with
    the other checks, not once prepare and the tokenizer have run."""
    uses = [key for key, used in (("evaluation.recognize", cfg.evaluation.recognize),
                                  ("dataset.transcript_check", any(d.transcript_check is not None for d in cfg.datasets)),
                                  ("dataset.short_clips", any(isinstance(d.short_clips, float) for d in cfg.datasets)))
            if used]
    return cfg.asr.folder_problems(", ".join(uses), per_language=cfg.evaluation.recognize) if uses else []


def config_from_dict(raw: Any, source: str = "<config>", given: Sequence[tuple[str, str]] = (),
                     run_checks: bool = False) -> Config:
    """The config ``raw`` (YAML read from ``source``) describes; one ConfigError lists every problem, each named after
    ``source`` or, for a key in ``given`` ((key, how it was set on the command line) pairs), the command line.
    ``run_checks``: also what a training or evaluation run needs (the recogniser folders it loads), for the commands
    that run one; a command that reads only some sections (prepare, transcribe --model) skips them."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a YAML mapping with sections like 'run:' and 'dataset:'")
    sections = {f.name: f.type for f in dataclasses.fields(Config) if f.name != "more_datasets"}
    hints = typing.get_type_hints(Config)
    built: dict[str, Any] = {}  # section name -> its dataclass (or the dataset list)
    for key, value in raw.items():
        if key not in sections:
            problems.append(f"{key}: unknown section{_did_you_mean(str(key), list(sections))}")
            continue
        if key == "dataset":
            built["dataset"], built["more_datasets"] = _build_datasets(value, problems)
            continue
        built[key] = _build_section(hints[key], value, key, problems)
    cfg = Config(**built)
    listed = isinstance(raw.get("dataset"), list)
    for name in sections:
        section = getattr(cfg, name)
        if hasattr(section, "check") and not (name == "dataset" and listed):  # list entries were checked above
            section.check(problems)
    _check_datasets(cfg, listed, problems)
    if cfg.checkpoint.best_metric != "eval_loss" and not cfg.evaluation.recognize:
        problems.append(f"checkpoint.best_metric: '{cfg.checkpoint.best_metric}' needs the sample CER; "
                        f"set evaluation.recognize: true or best_metric: eval_loss")
    if cfg.checkpoint.best_metric == "tail_rate" and not cfg.evaluation.quality:
        problems.append("checkpoint.best_metric: 'tail_rate' needs the samples listened to; set evaluation.quality: "
                        "true or another best_metric")
    stopping = cfg.training.early_stopping
    metric = cfg.checkpoint.best_metric if stopping.metric == "best_metric" else stopping.metric
    if stopping.enabled and metric != "eval_loss" and not cfg.evaluation.recognize:
        problems.append(f"training.early_stopping.metric: '{metric}' needs the sample CER; set evaluation.recognize: "
                        f"true or early_stopping.metric: eval_loss")
    if stopping.enabled and stopping.metric == "tail_rate" and not cfg.evaluation.quality:
        problems.append("training.early_stopping.metric: 'tail_rate' needs the samples listened to; set "
                        "evaluation.quality: true or another early_stopping.metric")
    if stopping.enabled and cfg.evaluation.every_steps == 0:
        problems.append("training.early_stopping: needs evaluations during training; set evaluation.every_steps "
                        "(e.g. 1000) or early_stopping.enabled: false")
    problems.extend(_unmet_needs(raw, cfg))
    if run_checks:
        problems.extend(_recognisers_missing(cfg))
    if problems:
        raise ConfigError("\n".join(_labelled(p, source, given) for p in problems))
    return cfg


def _tag_of(exc: yaml.constructor.ConstructorError) -> str:
    found = re.search(r"tag '([^']+)'", str(exc.problem))
    tag = found.group(1) if found else "?"
    return tag.replace("tag:yaml.org,2002:", "!!")


def duplicate_keys(text: str) -> list[str]:
    """``line N: key 'a.b' given twice (first on line M)`` for every key repeated in one mapping.

    YAML loaders keep the last value silently; a second ``training:`` section would replace the first.
    Reads the node tree only (``yaml.compose``): nothing is constructed.
    """
    found: list[str] = []

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                if key is not None and key != "<<":
                    name = f"{prefix}{key}"
                    line = key_node.start_mark.line + 1
                    if name in first:
                        found.append(f"line {line}: key '{name}' given twice (first on line {first[name]}); the "
                                     f"second would silently replace the first: keep one")
                    else:
                        first[name] = line
                walk(value_node, f"{prefix}{key}." if key is not None else prefix)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item, prefix)

    walk(yaml.compose(text, Loader=yaml.SafeLoader), "")
    return found


def locate_config(path: str | os.PathLike[str], project_configs: Path = PROJECT_CONFIGS) -> Path:
    """The config file ``--config`` names: the path as given, else ``configs/NAME`` of the project.

    A path that exists where the user stands always wins; only a name with no folder part that is not
    there is looked up in ``project_configs``, and the file used is logged, so nobody wonders which one ran.
    """
    given = Path(path)
    if given.is_file():
        return given
    shipped = project_configs / given.name
    if not given.exists() and given.name == str(given) and shipped.is_file():
        log.info("--config %s: not in %s; using %s", given, Path.cwd(), shipped)
        return shipped
    raise ConfigError(f"{given}: config file not found; pass --config with a YAML file (see configs/)")


def load_config(path: str | os.PathLike[str], overrides: list[str] | None = None,
                given_as: Mapping[str, str] | None = None, run_checks: bool = False) -> Config:
    """Read, override, type-check and validate a run config; one ConfigError lists every problem.

    A problem with a key an override set is named after the override (``--set KEY=VALUE``, or what ``given_as``
    says the user typed for it, e.g. ``--resume X``), not after the file: the file does not hold that value.
    ``run_checks``: see :func:`config_from_dict`.
    """
    path = locate_config(path)
    try:
        text = path.read_text(encoding="utf-8")
        duplicates = [f"{path}: {d}" for d in duplicate_keys(text)]
        raw = yaml.safe_load(text) or {}
    except yaml.constructor.ConstructorError as exc:  # e.g. !!python/object: safe loading builds no objects
        mark = exc.problem_mark
        where = f" line {mark.line + 1}:" if mark is not None else ""
        raise ConfigError(
            f"{path}:{where} tag '{_tag_of(exc)}' is not allowed; configs are read with safe YAML loading (plain "
            f"values only), remove the tag"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}:{where} is not valid YAML ({getattr(exc, 'problem', exc)})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; save the config as UTF-8") from None
    if not isinstance(raw, dict):
        return config_from_dict(raw, source=str(path))  # the one-line "expected a YAML mapping" error
    _refuse_repeated_overrides(overrides or [])
    for item in overrides or []:
        keys, value = parse_override(item)
        if keys[0] == "dataset" and isinstance(raw.get("dataset"), list):
            keys = _dataset_list_keys(item, keys, len(raw["dataset"]))
        node = raw
        for k in keys[:-1]:
            if isinstance(node, list):  # dataset.<i>.key: the i-th entry of a dataset list
                node = node[int(k)]
                continue
            if not isinstance(node.get(k, {}), (dict, list)):
                raise ConfigError(f"--set {item}: '{k}' is not a section")
            node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {item}: '{keys[-2]}' is not a section")
        node[keys[-1]] = value
    given = sorted(((_problem_key(item), (given_as or {}).get(item, f"--set {item}")) for item in overrides or []),
                   key=lambda pair: len(pair[0]), reverse=True)  # a key before the section it is in
    try:
        cfg = config_from_dict(raw, source=str(path), given=given, run_checks=run_checks)
    except ConfigError as exc:
        raise ConfigError("\n".join([*duplicates, str(exc)])) from None
    if duplicates:
        raise ConfigError("\n".join(duplicates))
    return cfg


def _refuse_repeated_overrides(overrides: list[str]) -> None:
    """``--set training.lr=1e-4 --set training.lr=2e-4``: which one was meant is not ours to guess."""
    given: dict[str, list[str]] = {}
    for item in overrides:
        given.setdefault(".".join(parse_override(item)[0]), []).append(item)
    repeated = [f"--set {key} is given {len(items)} times ({', '.join(items)}); give it once"
                for key, items in given.items() if len(items) > 1]
    if repeated:
        raise ConfigError("\n".join(repeated))


def _dataset_list_keys(item: str, keys: list[str], count: int) -> list[str]:
    """`dataset.<i>.key` for a dataset list; `dataset.key` is ambiguous there and refused."""
    if len(keys) >= 3 and keys[1].isdigit() and int(keys[1]) < count:
        return keys
    if len(keys) >= 3 and keys[1].isdigit():
        raise ConfigError(f"--set {item}: dataset {keys[1]} is out of range: this config lists {count} datasets, "
                          f"numbered 0-{count - 1}")
    raise ConfigError(
        f"--set {item}: dataset is a list of {count} datasets in this config; name the entry by its position, "
        f"e.g. --set dataset.0.{keys[-1]}=... (0 to {count - 1})"
    )


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """The config as plain data; several datasets are written back as the `dataset:` list they came from."""
    d = dataclasses.asdict(cfg)
    more = d.pop("more_datasets")
    if more:
        d["dataset"] = [d["dataset"], *more]
    return d


def dump_config(cfg: Config, path: str | os.PathLike[str]) -> None:
    """Write the resolved config (every default filled in) as YAML."""
    atomic_write(Path(path), yaml.safe_dump(config_to_dict(cfg), sort_keys=False, allow_unicode=True))
