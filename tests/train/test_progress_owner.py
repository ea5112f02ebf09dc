"""Training progress has one owner: a Progress is frozen, and the recipe (train/loop.py) is the only module that
makes one for the run (replaces it, or builds it), reading the source (no model, no training: milliseconds)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import xtts_ft
from xtts_ft.train.progress import Progress

PACKAGE = Path(xtts_ft.__file__).parent
OWNER = "train/loop.py"
BUILDERS = ("train/progress.py", "train/resume.py")  # the class itself; resume builds the checkpoint's (from_checkpoint)


def _names_progress(node: ast.AST) -> bool:
    return "progress" in ast.unparse(node).lower()


def progress_changes(tree: ast.AST) -> list[str]:
    """What in ``tree`` changes a run's Progress: ``x.progress = ...``, an attribute of something named
    progress assigned (``progress.step = 1``), ``replace(<progress>, ...)`` and ``object.__setattr__``."""
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and (
                        sub.attr == "progress" or _names_progress(sub.value)):
                    found.append(f"line {node.lineno}: {ast.unparse(target)} =")
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name.endswith("replace") and node.args and _names_progress(node.args[0]):
                found.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
            if name == "object.__setattr__" and node.args and _names_progress(node.args[0]):
                found.append(f"line {node.lineno}: {ast.unparse(node)[:60]}")
    return found


def _modules() -> dict[str, ast.AST]:
    return {path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
            for path in sorted(PACKAGE.rglob("*.py"))}


def test_a_progress_cannot_be_changed_in_place():
    progress = Progress()
    with pytest.raises(dataclasses.FrozenInstanceError):
        progress.step = 1  # type: ignore[misc]
    moved, better = progress.with_evaluation(1.0, {}, "eval_loss")
    assert better and moved.best_score == 1.0 and progress.best_score is None


def test_only_the_recipe_changes_the_progress():
    modules = _modules()
    elsewhere = {name: found for name, tree in modules.items() if name != OWNER and (found := progress_changes(tree))}
    assert elsewhere == {}
    # the check sees the recipe's own changes (a step, a rollback, an evaluation, a save): it can fail
    assert len(progress_changes(modules[OWNER])) >= 6


def _imports_progress(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.ImportFrom) and node.module == "xtts_ft.train.progress" for node in ast.walk(tree))


def test_only_the_recipe_and_the_resume_build_a_progress():
    built = {name for name, tree in _modules().items() if name == "train/progress.py" or _imports_progress(tree)
             for node in ast.walk(tree)
             if isinstance(node, ast.Call) and ast.unparse(node.func) in ("Progress", "Progress.from_checkpoint", "cls")}
    assert built <= {OWNER, *BUILDERS} and OWNER in built


def test_the_step_and_the_stability_controller_return_frozen_results():
    from xtts_ft.train import stability_control, step

    for result in (step.StepTaken, step.StepAbandoned, stability_control.Kept, stability_control.Skipped,
                   stability_control.RolledBack):
        assert dataclasses.is_dataclass(result) and result.__dataclass_params__.frozen, result  # type: ignore[attr-defined]
