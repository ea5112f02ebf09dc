"""The types of values read from or written to the run's JSON files, and the one place they are ``Any``.

A JSON file (``meta.json``, the history lines, the stage reports) holds whatever its writer put there, so a
reader narrows each value where it uses it (``isinstance``, ``float(...)``). Everywhere else the type
checker refuses an explicit ``Any`` (pyproject.toml ``[tool.mypy]``); this module is the exception it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Union

#: One value of a JSON document: a scalar, a list or an object (their members are again JsonValues).
JsonValue = Union[None, bool, int, float, str, list[Any], dict[str, Any]]
#: A JSON object as ``json.loads`` returns it, or as a writer hands it to ``json.dumps``.
JsonObject = dict[str, Any]
#: A JSON array as ``json.loads`` returns it, or a list of plain values that a writer unpacks as it packed them
#: (the random generators' states in a checkpoint: train/rng_state.py).
JsonArray = list[Any]
#: A JSON object only read (an evaluation's metrics as meta.json or a history line holds them).
JsonMapping = Mapping[str, Any]
