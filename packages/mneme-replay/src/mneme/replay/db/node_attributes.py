"""A node's metadata as the reader takes it: its ``zarr.json`` is a Zarr group whose
mneme attributes name the node's kind and pass that kind's schema (schema.py)."""

from __future__ import annotations

from pathlib import Path

from . import layout
from .chunks import GROUP_SCHEMA, load_json
from .errors import CorruptDataError
from .metadata import Spec


def node_attributes(path: Path, kind: str, schema: Spec, where: str) -> dict:
    """A node's ``attributes.mneme``, checked against its schema before any use."""
    doc = load_json(path / "zarr.json")
    GROUP_SCHEMA.check(doc, f"{path}/zarr.json")
    attrs = doc.get("attributes")
    attrs = attrs.get(layout.ATTRS_KEY) if isinstance(attrs, dict) else None
    if not isinstance(attrs, dict) or attrs.get("kind") != kind:
        raise CorruptDataError(f"{path}: not a mneme {kind} node")
    schema.check(attrs, where)
    return attrs
