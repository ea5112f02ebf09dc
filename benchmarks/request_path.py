"""The project modules a speech request passes through, and how often the path climbs back up a layer.

    python benchmarks/request_path.py                    # this checkout
    python benchmarks/request_path.py --root /tmp/old    # another checkout of the project (e.g. an older commit)

Two phases on a tiny random export (``serve_load.make_export``), each traced with ``sys.setprofile`` (and
``threading.setprofile``, so the decode loop's thread is seen too): **open** (``serve.model_source.resolve_model``
and ``SpeechEngine.open``: what serve does once at its start) and **request** (one ``SpeechEngine.synthesize`` of
a two-sentence text, every chunk read: what each caller's request does). Every call of a function defined in a
module of the package enters that module; the path is the modules in the order they are first entered (a decode
loop's thousand steps through the same modules are one visit each). Reported per phase: the distinct modules and the
climbs: entries into a module of a higher layer than the module entered before it (the layers of that checkout's
``utils/import_graph.py``), i.e. the path going back up after it went down (``serve -> evaluate -> checkpoint store
-> evaluate`` climbs once); and of those modules, how many are evaluation's (``xtts_ft.evaluate``: a serve request
that runs evaluation's code is a sideways dependency between two stages). ``--show`` prints each path.

Counting only: nothing is timed (the profiler makes every call slower), and the numbers do not depend on the load
of the machine. A random GPT never stops, so each piece is capped at ``--max-codes`` codes.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _trace(into: list[str]):
    """A profile function that appends the module of every project function called (from any thread)."""
    lock = threading.Lock()

    def profile(frame, event, _arg):
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name == "xtts_ft" or name.startswith("xtts_ft."):
                with lock:
                    if not into or into[-1] != name:
                        into.append(name)
    return profile


def traced(fn) -> list[str]:
    path: list[str] = []
    profile = _trace(path)
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return path


def first_visits(path: list[str]) -> list[str]:
    return list(dict.fromkeys(path))


def climbs(path: list[str], layer_of) -> int:
    return sum(1 for a, b in zip(path, path[1:]) if layer_of(b) > layer_of(a))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=HERE.parent, help="the checkout to trace (default: this one)")
    p.add_argument("--max-codes", type=int, default=12)
    p.add_argument("--show", action="store_true", help="print every phase's path of modules")
    args = p.parse_args()
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    sys.path.insert(1, str(HERE))
    import soundfile as sf
    from serve_load import TEXT, VOICE, make_export

    import_graph = importlib.import_module("utils.import_graph")
    from xtts_ft.serve.engine import SpeechEngine
    from xtts_ft.serve.model_source import resolve_model

    assert Path(sys.modules["xtts_ft"].__file__).resolve().is_relative_to(root), "traced the wrong checkout"
    with tempfile.TemporaryDirectory(prefix="request_path_") as tmp:
        work = Path(tmp)
        export = make_export("tiny", work)
        voices = work / "voices"
        voices.mkdir()
        data, rate = sf.read(VOICE)
        sf.write(voices / "spk1.wav", data, rate)
        opened: dict = {}

        def open_engine() -> None:
            opened["engine"] = SpeechEngine.open(resolve_model(export), "cpu", voices_dir=voices,
                                                 max_codes=args.max_codes)

        phases = {"open": traced(open_engine)}
        engine = opened["engine"]
        phases["request"] = traced(lambda: list(engine.synthesize(TEXT, "spk1")))
        engine.close()
        shutil.rmtree(work / "export", ignore_errors=True)

    layer_of = import_graph.layer_of
    print(f"request path of {root}")
    print("| phase | modules | climbs | of them evaluate's |")
    print("|---|---:|---:|---:|")
    phases["open + request"] = phases["open"] + phases["request"]
    for name, path in phases.items():
        visits = first_visits(path)
        evaluation = sum(1 for m in visits if m.startswith("xtts_ft.evaluate"))
        print(f"| {name} | {len(visits)} | {climbs(visits, layer_of)} | {evaluation} |")
    if args.show:
        for name, path in phases.items():
            print(f"\n{name}:")
            print(" -> ".join(f"{m.removeprefix('xtts_ft.')} ({import_graph.LAYERS[layer_of(m)][0]})"
                              for m in first_visits(path)))


if __name__ == "__main__":
    main()
