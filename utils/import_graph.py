"""The package's structure drawing and the rules its imports follow.

    python utils/import_graph.py                # check the rules; print the problems, exit 1 if any
    python utils/import_graph.py --write docs/structure.md   # regenerate the drawing
    python utils/import_graph.py --check-doc docs/structure.md  # exit 1 when the drawing is out of date

The layers below are the design: a module may import its own layer and the layers under it, never one
above it (an "upward" import), and no chain of imports may come back to where it started (a circle).
Imports of the project's own modules sit at the top of each file. A function-level import is kept only
for a heavy optional third-party package, and then in exactly one adapter module per package (so that a
command that does not need Gradio or FastAPI never pays for importing them). One module imports project
modules at run time, by name: cli.py imports the chosen command's module after parsing (DEFERRED); the
modules its table names are edges of the graph like any import, and what it imports at the top must not
reach a heavy package (so ``--help`` answers at once).

One rule is about names, not imports: checkpoint folders have one owner. Outside the checkpoint store's modules
and layout.py (CHECKPOINT_OWNERS), no module names ``CHECKPOINTS_DIR``, ``STEP_DIR_PATTERN`` or ``step_dir_name``
nor writes the literal folder names (``"checkpoints"``, ``"step_"``, ``"step_*"``, ``"step_000500"``): a checkpoint
folder's path, a listing of them, "is this one?", a move and retention come from the CheckpointStore.

The tests run the same checks (tests/test_import_graph.py).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "xtts_ft"

# Bottom first. Each entry: the layer's name and the module prefixes (below xtts_ft.) it holds.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("", "errors", "tempfiles", "safe_load", "stop_signals", "layout", "model_folder", "config",
                    "output_folder", "stages", "audio_io", "input_hash", "languages", "training_state", "figures",
                    "lora_weights", "run_lock", "json_types", "run_history", "stop_report", "speech_device", "peers")),
    ("quality", ("quality",)),
    ("text", ("text", "text_settings")),
    ("tokenizer", ("tokenizer",)),
    ("models", ("base_model", "random_model", "model", "gpt_targets", "gpt_forward", "gpt_compile")),
    ("data", ("data",)),
    ("asr", ("asr",)),
    ("checkpoints", ("checkpoint_record", "checkpoint_retention", "checkpoint_store")),
    ("train", ("train",)),
    ("run folder", ("run_folder",)),
    ("inference", ("inference",)),  # generation: loading, conditioning, batched decoder, vocoders (evaluate + serve)
    ("evaluate", ("evaluate",)),
    ("ingest", ("ingest",)),
    ("assess", ("assess",)),
    ("pipeline", ("pipeline",)),
    ("serve", ("serve",)),
    ("publish", ("publish",)),
    ("webapp", ("webapp",)),
    ("commands", ("cli", "__main__", "commands")),
]

# Finer than the layers: (modules, project modules they must not import, why). A module matches a prefix as
# LAYERS do (itself or below it).
FORBIDDEN: list[tuple[str, tuple[str, ...], str]] = [
    ("text", ("config",), "text scoring and normalising is pure text work"),
    ("ingest", ("train",), "ingest does not depend on training"),
    ("evaluate.synthesis", ("train",), "synthesis does not depend on training"),
    ("data.commonvoice", ("data.readers",), "readers import commonvoice; both share data/entries.py"),
    ("serve", ("evaluate",), "serving and evaluation share generation through xtts_ft/inference/, not each other"),
    ("evaluate", ("serve",), "serving and evaluation share generation through xtts_ft/inference/, not each other"),
]
# Foundation modules that import (almost) nothing of ours: the project modules each may import.
ONLY: dict[str, tuple[str, ...]] = {
    "languages": (), "audio_io": (), "input_hash": (), "stop_signals": (), "figures": (),
    "model_folder": ("layout",), "data.entries": ("errors",), "run_lock": ("errors", "layout"),
    "json_types": (), "run_history": ("json_types", "layout", "tempfiles"),
    "stop_report": ("json_types", "run_history"),
}

# Heavy optional third-party packages and the one module each may be imported in, inside a function.
ADAPTERS: dict[str, str] = {
    "gradio": "xtts_ft.webapp.gradio_adapter",
    "fastapi": "xtts_ft.serve.http_app",
    "uvicorn": "xtts_ft.serve.command",
    "wyoming": "xtts_ft.serve.wyoming_server",
    "datasets": "xtts_ft.data.hf_source",
    "silero_vad": "xtts_ft.ingest.vad",
    "peft": "xtts_ft.train.trainable",
    "onnxruntime": "xtts_ft.quality.onnx_models",  # silero-vad's whole-clip model and DNSMOS (prepare's workers too)
    "speechmos": "xtts_ft.quality.onnx_models",
    "matplotlib": "xtts_ft.figures",  # at the bottom: the dataset report (data) draws too, not only evaluate
}

# The one module that imports project modules at run time (importlib), and why. It names them as "module:function"
# strings (its command table); each becomes an import of the graph, checked like any other. What it imports at
# the top (and all that reaches, at the top) may not import these packages: --help loads nothing heavy.
DEFERRED: dict[str, str] = {
    "xtts_ft.cli": "imports the chosen command's module after parsing, so --help loads only the options (and, when "
                   "a config error ends one rank of a torchrun job, the function that tells the other ranks)",
}
# Checkpoint folders have one owner (docs/DESIGN.md "Checkpoint folder and record"): only these modules build or
# list checkpoint folder paths; every other module asks the CheckpointStore (xtts_ft/checkpoint_store.py).
CHECKPOINT_OWNERS = ("checkpoint_store", "checkpoint_record", "checkpoint_retention", "layout")
CHECKPOINT_NAMES = ("CHECKPOINTS_DIR", "STEP_DIR_PATTERN", "step_dir_name")
_CHECKPOINT_LITERAL = re.compile(r"^(checkpoints|step_(\d*|\*))/?$")

HEAVY_AT_PARSE = ("torch", "torchaudio", "TTS", "trainer", "transformers", "fastapi", "gradio")
_RUN_TARGET = re.compile(r"^(xtts_ft(?:\.\w+)+):\w+$")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (own) or top-level package (third-party)
    line: int
    at_top: bool  # module level (also inside if/try at module level), not inside a function or class body
    deferred: bool = False  # named by DEFERRED's module as "module:function", imported after parsing


@dataclass
class Graph:
    modules: dict[str, Path]
    own: list[Import] = field(default_factory=list)
    third_party: list[Import] = field(default_factory=list)
    by_name: list[tuple[str, int, str]] = field(default_factory=list)  # (module, line, how): imports at run time
    unknown: list[tuple[str, int, str]] = field(default_factory=list)  # (module, line, target): no such module
    checkpoint_paths: list[tuple[str, int, str]] = field(default_factory=list)  # (module, line, what): see above


def layer_of(module: str) -> int:
    rest = module[len(PACKAGE) + 1:] if module != PACKAGE else ""
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (prefix == "" and rest == "") or (prefix and (rest == prefix or rest.startswith(prefix + "."))):
                if len(prefix) > best_len:
                    best, best_len = index, len(prefix)
    return best


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def build_graph(root: Path = REPO) -> Graph:
    modules = {_module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}
    graph = Graph(modules)
    seen: set[tuple[str, str, int]] = set()
    stdlib = set(sys.stdlib_module_names)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        type_only = _type_checking_lines(tree)
        for node, at_top in _imports(tree):
            for target in _targets(node, package):
                if target == name:
                    continue
                if target.split(".")[0] == PACKAGE:
                    resolved = _own_module(target, modules)
                    if resolved and resolved != name and (name, resolved, node.lineno) not in seen:
                        seen.add((name, resolved, node.lineno))
                        graph.own.append(Import(name, resolved, node.lineno, at_top))
                elif target.split(".")[0] not in stdlib | {"__future__"} and node.lineno not in type_only:
                    top = target.split(".")[0]
                    if (name, top, node.lineno) not in seen:
                        seen.add((name, top, node.lineno))
                        graph.third_party.append(Import(name, top, node.lineno, at_top))
        _run_time_imports(graph, name, tree, modules)
        graph.checkpoint_paths += [(name, line, what) for line, what in checkpoint_path_uses(tree)]
    return graph


def checkpoint_path_uses(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, what) for each use of a checkpoint folder name in ``tree``: a CHECKPOINT_NAMES name (imported, used,
    or reached as an attribute) or a string that is a checkpoint folder name (also the text parts of an f-string)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name in CHECKPOINT_NAMES]
        elif isinstance(node, ast.Name) and node.id in CHECKPOINT_NAMES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in CHECKPOINT_NAMES:
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _CHECKPOINT_LITERAL.match(node.value):
            found.append((node.lineno, repr(node.value)))
    return sorted(set(found))


def _run_time_imports(graph: Graph, name: str, tree: ast.Module, modules: dict[str, Path]) -> None:
    """importlib / __import__ calls anywhere; in a DEFERRED module, its "module:function" names as imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in ("import_module", "__import__"):
                graph.by_name.append((name, node.lineno, called))
        if name in DEFERRED and isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _RUN_TARGET.match(node.value)
            if match:
                target = match.group(1)
                if target in modules:
                    graph.own.append(Import(name, target, node.lineno, at_top=False, deferred=True))
                else:
                    graph.unknown.append((name, node.lineno, target))


def heavy_at_parse(graph: Graph, module: str) -> list[str]:
    """The heavy packages importing ``module`` loads at once (its top-level imports, theirs, and parent packages),
    each once, as the shortest chain of modules that reaches it."""
    top_edges = defaultdict(list)
    for imp in graph.own:
        if imp.at_top:
            top_edges[imp.source].append(imp.target)
    heavy = defaultdict(list)
    for imp in graph.third_party:
        if imp.at_top and imp.target in HEAVY_AT_PARSE:
            heavy[imp.source].append(imp.target)
    found: dict[str, str] = {}
    seen, queue = {module}, [(module, [module])]
    while queue:
        current, chain = queue.pop(0)
        parts = current.split(".")
        parents = [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in graph.modules]
        for package in heavy[current]:
            found.setdefault(package, " -> ".join([*chain, package]))
        for nxt in [*parents, *top_edges[current]]:
            if nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, [*chain, nxt]))
    return list(found.values())


def _imports(tree: ast.Module):
    """Every import statement with whether it runs at import time of the module (not inside a def)."""
    def walk(node, at_top):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, at_top
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from walk(child, False)
            else:
                yield from walk(child, at_top)
    yield from walk(tree, True)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """Lines of the imports under ``if TYPE_CHECKING:``: a type checker reads them, Python never runs them, so a
    third-party package named there costs no import time (the project's own modules stay edges of the graph)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            lines |= {n.lineno for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def _targets(node, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = package.split(".")
        base = base[: len(base) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    # "from pkg import name" may import a submodule called name
    return [module] + [f"{module}.{alias.name}" for alias in node.names]


def _own_module(target: str, modules: dict[str, Path]) -> str | None:
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def circles(graph: Graph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    edges = defaultdict(set)
    for imp in graph.own:
        if not _is_parent_package(imp.source, imp.target):
            edges[imp.source].add(imp.target)
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(graph.modules):
        if v not in index:
            visit(v)
    return sorted(found)


def _is_parent_package(source: str, target: str) -> bool:
    """``xtts_ft.train.loop`` importing ``xtts_ft.train`` (its package's __init__) is how Python loads it."""
    return source.startswith(target + ".")


def _within(module: str, prefix: str) -> bool:
    full = f"{PACKAGE}.{prefix}"
    return module == full or module.startswith(full + ".")


def problems(graph: Graph) -> list[str]:
    found = []
    for imp in graph.own:
        for pattern, forbidden, why in FORBIDDEN:
            if _within(imp.source, pattern) and any(_within(imp.target, f) for f in forbidden):
                found.append(f"{imp.source}:{imp.line} imports {imp.target}: {why}")
        allowed = next((ok for name, ok in ONLY.items() if imp.source == f"{PACKAGE}.{name}"), None)
        if allowed is not None and not _is_parent_package(imp.source, imp.target) and \
                not any(_within(imp.target, a) for a in allowed):
            found.append(f"{imp.source}:{imp.line} imports {imp.target}: a foundation module that may import only "
                         f"{', '.join(allowed) or 'nothing of the project'}")
    for name in sorted(graph.modules):
        if layer_of(name) < 0:
            found.append(f"{name}: in no layer; add it to LAYERS in utils/import_graph.py")
    for group in circles(graph):
        found.append("circle: " + " <-> ".join(group))
    for imp in graph.own:
        src, dst = layer_of(imp.source), layer_of(imp.target)
        if src >= 0 and dst > src:
            found.append(f"{imp.source}:{imp.line} imports {imp.target}: upward ({LAYERS[src][0]} -> "
                         f"{LAYERS[dst][0]})")
        if not imp.at_top and not imp.deferred:
            found.append(f"{imp.source}:{imp.line} imports {imp.target} inside a function; move it to the top")
    for source, line, how in graph.by_name:
        if source not in DEFERRED:
            found.append(f"{source}:{line} imports a module by name ({how}); only {', '.join(DEFERRED)} may "
                         f"(DEFERRED in utils/import_graph.py): import it at the top")
    for source, line, target in graph.unknown:
        found.append(f"{source}:{line} names {target}, which is no module of the package")
    for source, line, what in graph.checkpoint_paths:
        if not any(_within(source, owner) for owner in CHECKPOINT_OWNERS):
            found.append(f"{source}:{line} uses {what}: only the CheckpointStore builds or lists checkpoint folders "
                         f"(xtts_ft/checkpoint_store.py); ask it (is_checkpoint, list, step_folders, folder_of, ...)")
    for source in DEFERRED:
        later = {imp.target for imp in graph.own if imp.source == source and imp.deferred}
        for imp in graph.own:
            if imp.source == source and imp.at_top and imp.target in later:
                found.append(f"{source}:{imp.line} imports {imp.target} at the top, which it imports after parsing; "
                             f"drop the import")
        if source in graph.modules:
            for chain in heavy_at_parse(graph, source):
                found.append(f"{chain}: a heavy package loaded before parsing (at the top, through {source}'s "
                             f"imports); it belongs in a module imported after parsing")
    for imp in graph.third_party:
        if imp.at_top:
            if imp.target in ADAPTERS and imp.source != ADAPTERS[imp.target]:
                found.append(f"{imp.source}:{imp.line} imports {imp.target} (heavy, optional) at the top; "
                             f"reach it through {ADAPTERS[imp.target]}")
        elif ADAPTERS.get(imp.target) != imp.source:
            where = f"only {ADAPTERS[imp.target]} may" if imp.target in ADAPTERS else "import it at the top"
            found.append(f"{imp.source}:{imp.line} imports {imp.target} inside a function; {where}")
    return found


def drawing(graph: Graph) -> str:
    """docs/structure.md: the layers, what each holds, and the imports between layers."""
    between = defaultdict(int)
    for imp in graph.own:
        src, dst = layer_of(imp.source), layer_of(imp.target)
        if src != dst and src >= 0 and dst >= 0:
            between[(src, dst)] += 1
    lines = [
        "# Structure of the xtts_ft package",
        "",
        "Generated by `python utils/import_graph.py --write docs/structure.md` from the source; "
        "tests/test_import_graph.py fails when it is out of date or when an import breaks the rules "
        "(no circle, no import from a lower layer to a higher one, the project's imports at the top of each file, "
        "a heavy optional package imported lazily in one adapter only, cli.py's commands imported by name after "
        "parsing and nothing heavy before it).",
        "",
        "Layers, top first; a layer may import only the layers below it.",
        "",
        "```mermaid",
        "flowchart TD",
    ]
    for index, (name, _) in enumerate(LAYERS):
        lines.append(f'    L{index}["{name}"]')
    for (src, dst), count in sorted(between.items()):
        lines.append(f"    L{src} -->|{count}| L{dst}")
    lines += ["```", "", "| layer | modules | imports it makes into lower layers |", "|---|---|---|"]
    for index in range(len(LAYERS) - 1, -1, -1):
        name = LAYERS[index][0]
        members = sorted(m.removeprefix(PACKAGE + ".") if m != PACKAGE else PACKAGE
                         for m in graph.modules if layer_of(m) == index)
        out = sum(count for (src, _), count in between.items() if src == index)
        lines.append(f"| {name} | {', '.join(f'`{m}`' for m in members)} | {out} |")
    lines += ["", "Heavy optional packages and their one adapter each:", ""]
    lines += [f"- `{dep}`: `{module}`" for dep, module in sorted(ADAPTERS.items())]
    for source, why in DEFERRED.items():
        later = sorted({imp.target.removeprefix(PACKAGE + ".") for imp in graph.own
                        if imp.source == source and imp.deferred})
        lines += ["", f"Imported by name (DEFERRED): `{source.removeprefix(PACKAGE + '.')}` {why}: "
                      + ", ".join(f"`{m}`" for m in later) + "."]
    upward = sum(1 for (src, dst) in between if dst > src)
    lines += ["", f"Upward imports: {upward}. Circles: {len(circles(graph))}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="write the drawing (Markdown) to this file")
    parser.add_argument("--check-doc", type=Path, help="exit 1 if this file is not the current drawing")
    args = parser.parse_args(argv)
    graph = build_graph()
    if args.write:
        args.write.write_text(drawing(graph), encoding="utf-8")
        print(f"wrote {args.write}")
    if args.check_doc:
        current = args.check_doc.read_text(encoding="utf-8") if args.check_doc.is_file() else ""
        if current != drawing(graph):
            print(f"{args.check_doc} is out of date: run python utils/import_graph.py --write {args.check_doc}")
            return 1
    found = problems(graph)
    for line in found:
        print(line)
    print(f"{len(graph.modules)} modules, {len(graph.own)} imports of the project's own modules, "
          f"{len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
