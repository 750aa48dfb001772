"""Words shared by environments whose listings are Python: identifiers in shared pieces."""

from __future__ import annotations


def identifier_pieces(name: str) -> list[str]:
    """An identifier as the pieces a tokenizer would share: `compute_values` -> compute _ values."""
    parts = name.split("_")
    if len(parts) == 1 or not all(parts):
        return [name]
    out = [parts[0]]
    for p in parts[1:]:
        out += ["_", p]
    return out
