"""Paths into a JSON value and edits at them, for the malformed-input property tests
(``test_malformed_scenes.py``, ``test_malformed_readers.py``)."""
from __future__ import annotations


def json_paths(obj, prefix=()) -> list[tuple]:
    """Every path (tuple of keys / indices) to a node of ``obj``."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += json_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += json_paths(v, prefix + (i,))
    return out


def parent_of(d, path: tuple):
    """The container holding the node at ``path``."""
    for key in path[:-1]:
        d = d[key]
    return d


def delete_at(parent, key) -> None:
    """Removes ``parent[key]`` (a dict key or a list item)."""
    if isinstance(parent, dict):
        del parent[key]
    else:
        parent.pop(key)
