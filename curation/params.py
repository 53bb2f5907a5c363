"""Placeholders in curation SQL: a string literal spelled ``'<name>'`` stands for a value the
caller gives (``params`` in the HTTP request, ``--param name=value`` at the command line).

Values are bound into the parsed tree as literal nodes, never pasted into the text, so a value
is always one SQL literal whatever it contains; the guard then checks the bound tree like any
other. A placeholder left unfilled, a value for no placeholder, and a value that is itself a
placeholder are refused (:func:`curation.guard.check_curation` says which).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sqlglot import exp

ParamValue = str | int | float | bool
"""What a placeholder may be bound to: one SQL string, number or boolean literal."""

PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>")


def placeholder_name(node: exp.Expr) -> str | None:
    """The name of the placeholder ``node`` is (a string literal ``'<name>'``), else ``None``."""
    if not isinstance(node, exp.Literal) or not node.is_string:
        return None
    match = _PLACEHOLDER.fullmatch(str(node.this))
    return match.group(1) if match else None


def placeholders(tree: exp.Expr) -> list[exp.Literal]:
    """Every placeholder literal of ``tree``, in the order the query spells them."""
    return [n for n in tree.find_all(exp.Literal) if placeholder_name(n) is not None]


def is_placeholder_text(value: ParamValue) -> bool:
    """Whether ``value`` is itself spelled like a placeholder (it would bind to one)."""
    return isinstance(value, str) and _PLACEHOLDER.fullmatch(value) is not None


def literal(value: ParamValue) -> exp.Expr:
    """``value`` as one SQL literal node (booleans first: ``bool`` is an ``int``)."""
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int | float):
        node: exp.Expr = exp.Literal.number(repr(abs(value)))
        return exp.Neg(this=node) if value < 0 else node
    return exp.Literal.string(value)


def bind(tree: exp.Expr, params: Mapping[str, ParamValue]) -> None:
    """Replace, in place, each placeholder of ``tree`` that ``params`` names by its value."""
    for node in placeholders(tree):
        name = placeholder_name(node)
        if name is not None and name in params:
            node.replace(literal(params[name]))
