"""Each run file has one owner: the rules that keep it so, checked on the source (ast; nothing is imported).

    python utils/file_owners.py        # list what breaks the rules; exit 1 if anything does

- The run's history files (metrics.jsonl, events.jsonl, samples/index.jsonl) are read, appended and truncated
  only by xtts_ft/run_history.py: no other module names their constants, builds their path from a RunLayout
  (``RunLayout(d).metrics``, ``layout.events`` after ``layout = RunLayout(d)``, ``.samples_index``) or spells a
  ``.jsonl`` file name.
- A file name that xtts_ft/layout.py defines is spelt only there: anywhere else a string literal equal to one of
  them (``"report.json"``) is a second definition; import the constant. Docstrings may name files; a module
  that names a file of the same name in a folder the project does not lay out (a recogniser's Hugging Face
  folder has its own vocab.json) is listed in ELSEWHERE with the reason.

The package and benchmarks/ (which read run folders too) are checked alike. The tests run the same check
(tests/test_file_owners.py).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "xtts_ft"
BENCHMARKS = "benchmarks"
LAYOUT = "layout.py"
HISTORY_OWNER = "run_history.py"  # relative to the package
HISTORY_CONSTANTS = ("METRICS_FILE", "EVENTS_FILE", "INDEX_FILE")
HISTORY_PATHS = ("metrics", "events", "samples_index")  # RunLayout properties of the history files
JSONL_NAME = re.compile(r"^[\w./-]*\.jsonl$")

# (module path below the package, file name): why that module spells a name layout.py also defines
ELSEWHERE: dict[tuple[str, str], str] = {
    ("asr/model_files.py", "vocab.json"): "a recogniser's Hugging Face folder, not a run or checkpoint folder",
    ("data/transcript_check.py", "vocab.json"): "a recogniser's Hugging Face folder, not a run or checkpoint folder",
    ("benchmarks/asr_throughput.py", "vocab.json"): "a recogniser's Hugging Face folder, not a run or checkpoint folder",
}


def layout_file_names(root: Path = REPO) -> dict[str, str]:
    """file name -> the layout.py constant that defines it (names with a dot: files, not folders)."""
    tree = ast.parse((root / PACKAGE / LAYOUT).read_text(encoding="utf-8"))
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            target = node.targets[0]
            if isinstance(target, ast.Name) and "." in node.value.value:
                names.setdefault(node.value.value, target.id)
    return names


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _is_run_layout_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "RunLayout"


def _layout_names(tree: ast.Module) -> set[str]:
    """Names (``layout``, ``self.layout``) the module binds to a ``RunLayout(...)``."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _is_run_layout_call(node.value):
            bound.update(ast.unparse(target) for target in node.targets)
    return bound


def _is_run_layout(node: ast.AST, bound: set[str]) -> bool:
    return _is_run_layout_call(node) or (isinstance(node, (ast.Name, ast.Attribute)) and ast.unparse(node) in bound)


def problems(root: Path = REPO) -> list[str]:
    files = layout_file_names(root)
    found = []
    # the benchmarks read run folders too: they ask the same owners as the package
    sources = [*sorted((root / PACKAGE).rglob("*.py")), *sorted((root / BENCHMARKS).glob("*.py"))]
    for path in sources:
        where = path.relative_to(root).as_posix()
        rel = where.removeprefix(f"{PACKAGE}/")  # a benchmark keeps its benchmarks/ prefix: never an owner
        if rel == LAYOUT:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        docstrings, bound = _docstrings(tree), _layout_names(tree)
        for node in ast.walk(tree):
            line = getattr(node, "lineno", 0)
            if rel != HISTORY_OWNER:
                named = (node.id if isinstance(node, ast.Name) else
                         node.name if isinstance(node, ast.alias) else None)
                if named in HISTORY_CONSTANTS:
                    found.append(f"{where}:{line} names {named}: the history files belong to {PACKAGE}/"
                                 f"{HISTORY_OWNER}; use its readers and appenders")
                if isinstance(node, ast.Attribute) and node.attr in HISTORY_PATHS and (
                        _is_run_layout(node.value, bound) or node.attr == "samples_index"):
                    found.append(f"{where}:{line} takes RunLayout(...).{node.attr}: the history files belong to "
                                 f"{PACKAGE}/{HISTORY_OWNER}; use its readers and appenders")
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
                continue
            if rel != HISTORY_OWNER and JSONL_NAME.match(node.value):
                found.append(f"{where}:{line} spells the JSONL file {node.value!r}: such files belong to "
                             f"{PACKAGE}/{HISTORY_OWNER}")
            elif node.value in files and (rel, node.value) not in ELSEWHERE:
                found.append(f"{where}:{line} spells {node.value!r}, which {PACKAGE}/{LAYOUT} defines as "
                             f"{files[node.value]}: import it")
    return found


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    print(f"{len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
