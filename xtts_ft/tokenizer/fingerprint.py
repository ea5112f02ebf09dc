"""A vocabulary fingerprint: the hash of the token table, stored with checkpoints and exports."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def vocab_fingerprint(vocab_path: str | Path) -> str:
    """sha256 over (token, id) pairs, added tokens and merges: equal iff encoding is the same."""
    data = json.loads(Path(vocab_path).read_text(encoding="utf-8"))
    model = data.get("model", {})
    table = {
        "vocab": sorted(model.get("vocab", {}).items(), key=lambda kv: kv[1]),
        "merges": model.get("merges", []),
        "added": sorted((t["id"], t["content"]) for t in data.get("added_tokens", [])),
    }
    blob = json.dumps(table, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]
