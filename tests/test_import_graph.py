"""The package's import graph follows its design, and docs/structure.md is its current drawing.

utils/import_graph.py reads the source (ast); nothing is imported or run. Its rules: every module in a
layer, no circle, no import from a lower layer up to a higher one, the project's own imports at the top of
each file, a heavy optional package imported inside functions of its one adapter only, and the finer
FORBIDDEN / ONLY rules, and one rule about names: outside the checkpoint store's modules and layout.py nothing
names a checkpoint folder (CHECKPOINTS_DIR, step_dir_name, "checkpoints", "step_..."). One module (cli.py,
DEFERRED) imports project modules by name after parsing: the "module:function" names of its command table
are imports of the graph, and nothing it imports at the top may reach a heavy package.
"""

from __future__ import annotations

from pathlib import Path

from utils import import_graph

REPO = Path(__file__).resolve().parents[1]



def test_the_import_graph_follows_the_layers_and_the_drawing_is_current(tmp_path):
    graph = import_graph.build_graph(REPO)
    found = import_graph.problems(graph)
    assert found == [], "python utils/import_graph.py lists these"
    assert not import_graph.circles(graph)

    drawing = (REPO / "docs" / "structure.md").read_text(encoding="utf-8")
    assert drawing == import_graph.drawing(graph), "run python utils/import_graph.py --write docs/structure.md"

    # the checker itself finds what it is there to find: a small package with one of each problem
    pkg = tmp_path / "xtts_ft"
    for sub in ("data", "serve", "evaluate", "inference"):
        (pkg / sub).mkdir(parents=True)
    files = {
        "__init__.py": "",
        "errors.py": "import gradio\n",  # heavy optional package outside its adapter
        # named for a type checker only: never imported at run time, so no problem
        "stop_signals.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import gradio\n",
        "languages.py": "from xtts_ft import errors\n",  # a foundation module that may import nothing of ours
        "data/__init__.py": "",
        "data/readers.py": "from xtts_ft.data import commonvoice\n",
        "data/commonvoice.py": "import torch\nfrom xtts_ft.data import readers\n\n\ndef f():\n    import numpy\n",
        "layout.py": "from xtts_ft.data import readers\n",  # foundation -> data: upward
        "serve/__init__.py": "",
        "serve/engine.py": "from xtts_ft.evaluate import synthesis\n",  # allowed by the layers, not by FORBIDDEN
        "evaluate/__init__.py": "",
        "evaluate/synthesis.py": "from xtts_ft.inference import conditioning\n",
        "inference/__init__.py": "",
        "inference/conditioning.py": "",
        "mystery.py": "",  # in no layer
    }
    for name, text in files.items():
        (pkg / name).write_text(text, encoding="utf-8")
    bad = "\n".join(import_graph.problems(import_graph.build_graph(tmp_path)))
    assert "xtts_ft.mystery: in no layer" in bad
    assert "circle: xtts_ft.data.commonvoice <-> xtts_ft.data.readers" in bad
    assert "xtts_ft.layout:1 imports xtts_ft.data.readers: upward (foundation -> data)" in bad
    assert "xtts_ft.data.commonvoice:6 imports numpy inside a function" in bad
    assert "xtts_ft.errors:1 imports gradio (heavy, optional) at the top" in bad
    assert "xtts_ft.languages:1 imports xtts_ft.errors: a foundation module" in bad
    assert "readers import commonvoice" in bad
    assert "xtts_ft.serve.engine:1 imports xtts_ft.evaluate.synthesis: serving and evaluation share" in bad
    assert "xtts_ft.evaluate.synthesis:1 imports" not in bad  # both may import generation
    assert "torch" not in bad  # a core package at the top is how it should be
    assert "stop_signals" not in bad


def test_the_commands_imported_after_parsing_are_checked_like_any_import(tmp_path):
    """cli.py's command table is part of the graph (the real one, and a broken copy of the rules' cases)."""
    graph = import_graph.build_graph(REPO)
    later = {imp.target for imp in graph.own if imp.source == "xtts_ft.cli" and imp.deferred}
    assert later == {"xtts_ft.commands.data", "xtts_ft.commands.text", "xtts_ft.commands.vocab",
                     "xtts_ft.commands.recordings", "xtts_ft.commands.training", "xtts_ft.commands.models",
                     "xtts_ft.commands.apps", "xtts_ft.commands.launch",
                     "xtts_ft.peers"}  # peers: a config error on one rank of a torchrun job is told to the others
    assert {imp.target for imp in graph.own if imp.source == "xtts_ft.cli" and imp.at_top} == {
        "xtts_ft.commands", "xtts_ft.commands.arguments", "xtts_ft.commands.common"}  # common: read_config
    assert import_graph.heavy_at_parse(graph, "xtts_ft.cli") == []
    for light in ("xtts_ft.commands.common", "xtts_ft.commands.text", "xtts_ft.commands.data"):  # normalize, prepare
        assert import_graph.heavy_at_parse(graph, light) == [], light
    assert any("xtts_ft.commands.training" in chain and chain.endswith("-> torch")
               for chain in import_graph.heavy_at_parse(graph, "xtts_ft.commands.training"))

    pkg = tmp_path / "xtts_ft"
    (pkg / "commands").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "commands/__init__.py": "",
        "commands/arguments.py": "import argparse\n",
        "commands/heavy.py": "import torch\n\n\ndef run(args):\n    return 0\n",
        # the table may name modules; importing one of them at the top as well defeats it
        "cli.py": ("import importlib\n\nfrom xtts_ft.commands import arguments, heavy\n\n"
                   "TABLE = {'a': 'xtts_ft.commands.heavy:run', 'b': 'xtts_ft.commands.gone:run'}\n\n\n"
                   "def main(name):\n    module, _, function = TABLE[name].partition(':')\n"
                   "    return getattr(importlib.import_module(module), function)\n"),
        "layout.py": "import importlib\n\nX = importlib.import_module('json')\n",  # by name, outside DEFERRED
    }
    for name, text in files.items():
        (pkg / name).write_text(text, encoding="utf-8")
    bad = import_graph.problems(import_graph.build_graph(tmp_path))
    assert "xtts_ft.cli:5 names xtts_ft.commands.gone, which is no module of the package" in bad
    assert "xtts_ft.cli:3 imports xtts_ft.commands.heavy at the top, which it imports after parsing; drop the import" in bad
    assert any(line.startswith("xtts_ft.cli -> xtts_ft.commands.heavy -> torch: a heavy package loaded before parsing")
               for line in bad)
    assert any(line.startswith("xtts_ft.layout:3 imports a module by name (import_module); only xtts_ft.cli may")
               for line in bad)
    assert not any("inside a function" in line for line in bad)  # the table's import is the named exception
    assert not any(line.startswith("xtts_ft.cli:") and "by name" in line for line in bad)


def test_only_the_checkpoint_store_builds_or_lists_checkpoint_folders(tmp_path):
    """Every way of naming a checkpoint folder outside the store is one problem line; the store may, and step_of
    (a step from a name: sample folders are named alike) stays free."""
    graph = import_graph.build_graph(REPO)
    assert {source for source, _, _ in graph.checkpoint_paths} <= {
        f"xtts_ft.{owner}" for owner in import_graph.CHECKPOINT_OWNERS}
    assert any(source == "xtts_ft.checkpoint_store" for source, _, _ in graph.checkpoint_paths)  # it does look

    pkg = tmp_path / "xtts_ft"
    pkg.mkdir()
    files = {
        "__init__.py": "",
        "layout.py": 'CHECKPOINTS_DIR = "checkpoints"\n\n\ndef step_dir_name(step):\n    return f"step_{step:06d}"\n',
        "checkpoint_store.py": "from xtts_ft.layout import CHECKPOINTS_DIR, step_dir_name\n",
        "errors.py": (
            "from xtts_ft import layout\nfrom xtts_ft.layout import CHECKPOINTS_DIR\n\n\n"
            "def listing(run):\n    return sorted((run / 'checkpoints').glob('step_*'))\n\n\n"
            "def one(run, step):\n    return run / CHECKPOINTS_DIR / f'step_{step:06d}'\n\n\n"
            "def other(run, step):\n    return run / layout.CHECKPOINTS_DIR / layout.step_dir_name(step)\n\n\n"
            "def fine(name):\n    return layout.step_of(name), 'step_every', 'a folder like checkpoints/step_001000'\n"
        ),
    }
    for name, text in files.items():
        (pkg / name).write_text(text, encoding="utf-8")
    bad = [line for line in import_graph.problems(import_graph.build_graph(tmp_path)) if "CheckpointStore" in line]
    assert [line.split(": only")[0] for line in bad] == [
        "xtts_ft.errors:2 uses CHECKPOINTS_DIR",
        "xtts_ft.errors:6 uses 'checkpoints'",
        "xtts_ft.errors:6 uses 'step_*'",
        "xtts_ft.errors:10 uses 'step_'",
        "xtts_ft.errors:10 uses CHECKPOINTS_DIR",
        "xtts_ft.errors:14 uses CHECKPOINTS_DIR",
        "xtts_ft.errors:14 uses step_dir_name",
    ], bad
    assert all("only the CheckpointStore builds or lists checkpoint folders" in line for line in bad)
