"""A griffe extension for the API reference (mkdocs.yml, docs/reference/): a package of
mneme.tune whose names are imported when first used (mneme.tune._lazy) may compute
``__all__`` from its ``_LAZY`` table, which griffe, reading the source, cannot evaluate.
This adds the table's names to the package's exports (its ``if TYPE_CHECKING:`` block
tells griffe where each comes from)."""

from __future__ import annotations

import ast
from typing import Any

import griffe


class LazyExports(griffe.Extension):
    def on_module_members(self, *, node: ast.AST | griffe.ObjectNode, mod: griffe.Module,
                          agent: griffe.Visitor | griffe.Inspector, **kwargs: Any) -> None:
        if not isinstance(node, ast.Module):
            return
        for statement in node.body:
            if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                    and getattr(statement.targets[0], "id", None) == "_LAZY"):
                mod.exports = sorted({*(mod.exports or ()), *ast.literal_eval(statement.value)})
