"""The curation guard: only a single, side-effect-free SELECT over the curation views runs.

The SQL is parsed with sqlglot (DuckDB dialect) and the tree is walked against allow-lists of
node types, functions and relations. Anything not listed is refused with the reason, the node
and where it sits. Only SQL re-rendered from the checked tree is ever executed, so text the
parser ignored (comments, a second statement) cannot reach the engine.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import sqlglot
from sqlglot import TokenType, exp
from sqlglot.errors import ParseError, SqlglotError
from sqlglot.tokens import Tokenizer

from curation.allowlist import ALLOWED_FUNCTIONS, ALLOWED_NODES, REFUSED_WHY
from curation.errors import BadRequestError
from curation.params import (
    PARAM_NAME,
    ParamValue,
    bind,
    is_placeholder_text,
    placeholder_name,
    placeholders,
)
from curation.render import render

MAX_SQL_BYTES = 64 * 1024
MAX_NODES = 5_000
MAX_DEPTH = 64
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Comments are not tokens; a leading parenthesis starts a parenthesized query.
_SKIPPED_TOKENS = frozenset({TokenType.L_PAREN})


class CurationRefusedError(BadRequestError):
    """The curation SQL is not a plain read of the curation views; ``reason`` says why."""

    title = "Curation refused"


@dataclass(frozen=True)
class CheckedQuery:
    """A curation that passed the guard. ``tree`` is a private copy: render it, never the
    user's text."""

    tree: exp.Query

    def render(self, dialect: str = "duckdb") -> str:
        return render(self.tree, dialect)

    @property
    def relations(self) -> frozenset[str]:
        """The curation views the query reads (CTE names excluded)."""
        ctes = _cte_names(self.tree)
        return frozenset(t.name.lower() for t in self.tree.find_all(exp.Table)) - ctes

    @property
    def normalized(self) -> str:
        """The canonical text of the curation (DuckDB dialect), used in reuse keys."""
        return self.tree.sql(dialect="duckdb", normalize=True, comments=False)


def check_curation(
    sql: str, relations: frozenset[str], params: Mapping[str, ParamValue] | None = None
) -> CheckedQuery:
    """Parse ``sql``, bind ``params`` to its placeholders (:mod:`curation.params`) and refuse
    anything but one SELECT over ``relations`` (lower-case names)."""
    if len(sql.encode()) > MAX_SQL_BYTES:
        raise _refuse(f"the query is longer than {MAX_SQL_BYTES} bytes", "size")
    if "\x00" in sql:  # no database stores it in text: the registry could not record the query
        raise _refuse("the query contains a NUL character", "syntax")
    tree = _parse_one(sql)
    _bind_params(tree, params or {})
    if isinstance(tree, exp.Select) and not tree.expressions:
        raise _refuse("the query selects nothing", "syntax")
    if not isinstance(tree, exp.Query):
        raise _refuse(f"only SELECT queries are curations, not {_name(tree)}", "statement")
    _walk(tree, relations | _cte_names(tree), sql)
    return CheckedQuery(tree.copy())


def _bind_params(tree: exp.Expr, params: Mapping[str, ParamValue]) -> None:
    """Bind ``params`` into ``tree``; refuse a bad value, a value for no placeholder, and a
    placeholder left unfilled. The bound tree then goes through the guard like any other."""
    for name, value in params.items():
        _check_param(name, value)
    names = [placeholder_name(node) for node in placeholders(tree)]
    unknown = sorted(set(params) - set(names))
    if unknown:
        raise _refuse(
            f"param {unknown[0]!r} fills no placeholder: the query has "
            + (", ".join(f"'<{n}>'" for n in dict.fromkeys(names)) or "none"),
            "params",
        )
    bind(tree, params)
    missing = [placeholder_name(node) for node in placeholders(tree)]
    if missing:
        first = missing[0]
        raise CurationRefusedError(
            f"placeholder '<{first}>' is not filled: give its value as params "
            f'{{"{first}": ...}} (quarry: --param {first}=VALUE)',
            reason="placeholder",
            placeholder=first,
        )
    if len(tree.sql(dialect="duckdb").encode()) > MAX_SQL_BYTES:
        raise _refuse(f"the query with its params is longer than {MAX_SQL_BYTES} bytes", "size")


def _check_param(name: str, value: ParamValue) -> None:
    if not PARAM_NAME.fullmatch(name):
        raise _refuse(f"param name {name!r} is not a word (letters, digits, _)", "params")
    if isinstance(value, str) and "\x00" in value:
        raise _refuse(f"param {name!r} contains a NUL character", "params")
    if isinstance(value, float) and not math.isfinite(value):
        raise _refuse(f"param {name!r} is not a finite number", "params")
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise _refuse(f"param {name!r} does not fit in 64 bits", "params")
    if is_placeholder_text(value):
        raise _refuse(f"param {name!r} is itself a placeholder ({value!r})", "params")
    if not isinstance(value, str | int | float):  # bool is an int
        raise _refuse(f"param {name!r} is not a string, number or boolean", "params")


def _check_start(sql: str) -> None:
    """A query that does not parse and does not start with a statement keyword (a typo such
    as ``SELEC``) is refused as such, not with whatever the parser made of the word."""
    try:
        tokens = Tokenizer(dialect="duckdb").tokenize(sql)
    except SqlglotError:
        return
    first = next((t for t in tokens if t.token_type not in _SKIPPED_TOKENS), None)
    if first is not None and first.token_type in (TokenType.VAR, TokenType.IDENTIFIER):
        raise _refuse(
            f"the query does not parse: {first.text!r} at line {first.line}, col "
            f"{first.col - len(first.text) + 1} is not a statement keyword; a curation "
            "starts with SELECT or WITH",
            "syntax",
        )


def _parse_one(sql: str) -> exp.Expr:
    try:
        statements = [s for s in sqlglot.parse(sql, read="duckdb") if s is not None]
    except ParseError as error:
        _check_start(sql)
        raise _refuse(f"the query does not parse: {_first_error(error)}", "syntax") from None
    except SqlglotError as error:  # the tokenizer's: unterminated quotes and strings
        raise _refuse(f"the query does not parse: {error}", "syntax") from None
    if len(statements) != 1:
        raise _refuse(f"send exactly one statement, not {len(statements)}", "statements")
    return statements[0]


def _walk(tree: exp.Expr, relations: frozenset[str], sql: str) -> None:
    for count, node in enumerate(tree.walk()):
        if count > MAX_NODES:
            raise _refuse(f"the query has more than {MAX_NODES} syntax nodes", "size")
        if node.depth > MAX_DEPTH:
            raise _refuse(f"the query nests deeper than {MAX_DEPTH}", "size")
        _check_node(node, relations, sql)


def _check_node(node: exp.Expr, relations: frozenset[str], sql: str) -> None:
    kind = type(node)
    if kind in REFUSED_WHY:
        reason, why = REFUSED_WHY[kind]
        raise _refuse(f"{_describe(node, sql)} is not allowed: {why}", reason, node)
    if kind in ALLOWED_NODES:
        _check_allowed_node(node, relations, sql)
        return
    if kind in ALLOWED_FUNCTIONS:
        return
    if isinstance(node, exp.Func):
        raise _refuse(f"{_describe(node, sql)} is not allowed", "function", node)
    raise _refuse(f"{_describe(node, sql)} is not allowed in a curation", "node", node)


def _check_allowed_node(node: exp.Expr, relations: frozenset[str], sql: str) -> None:
    """The forms of allowed node types that are still refused."""
    if isinstance(node, exp.Table):
        _check_table(node, relations, sql)
    elif isinstance(node, exp.Column) and (node.args.get("db") or node.args.get("catalog")):
        raise _refuse(f"qualified column {node.sql()!r} is not allowed", "qualified_name", node)
    elif isinstance(node, exp.With) and node.args.get("recursive"):
        raise _refuse(
            "recursive CTEs are not allowed: a curation reads the views, it does not generate rows",
            "recursive",
            node,
        )
    elif isinstance(node, exp.Join) and str(node.args.get("method") or "").upper() == (
        "POSITIONAL"
    ):
        raise _refuse(
            "POSITIONAL JOIN pairs rows by storage order, which is not reproducible",
            "nondeterministic",
            node,
        )


def _check_table(table: exp.Table, relations: frozenset[str], sql: str) -> None:
    if not isinstance(table.this, exp.Identifier):
        name = _spelled(table.this, sql) or table.this.sql()
        raise _refuse(f"table function {name!r} is not allowed", "table_function", table)
    if table.args.get("db") or table.args.get("catalog"):
        raise _refuse(
            f"qualified name {table.sql()!r} is not allowed; use the bare view name",
            "qualified_name",
            table,
        )
    if table.name.lower() not in relations:
        allowed = ", ".join(sorted(relations))
        raise _refuse(
            f"unknown relation {table.name!r}; curations read only: {allowed}", "relation", table
        )


def _cte_names(tree: exp.Expr) -> frozenset[str]:
    return frozenset(cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE))


def _refuse(message: str, reason: str, node: exp.Expr | None = None) -> CurationRefusedError:
    context = {"reason": reason}
    if node is not None:
        context["node"] = node.sql(dialect="duckdb")[:200]
    return CurationRefusedError(message, **context)


def _name(node: exp.Expr) -> str:
    return node.key.upper()


def _describe(node: exp.Expr, sql: str) -> str:
    if isinstance(node, exp.Func):
        spelled = _spelled(node, sql)
        if spelled:
            return f"function {spelled.lower()}"
    if isinstance(node, exp.Anonymous):
        return f"function {str(node.name).lower()}"
    if isinstance(node, exp.Func):
        return f"function {node.sql_name().lower()}"
    return _name(node)


def _spelled(node: exp.Expr, sql: str) -> str | None:
    """The name of a function as the user wrote it (sqlglot maps ``unnest`` to EXPLODE and
    ``range`` to GENERATE_SERIES), from the source position the parser recorded."""
    start, end = node.meta.get("start"), node.meta.get("end")
    if not isinstance(start, int) or not isinstance(end, int):
        return None
    text = sql[start : end + 1]
    return text if _WORD.fullmatch(text) else None


def _first_error(error: ParseError) -> str:
    if error.errors:
        first = error.errors[0]
        return f"{first.get('description')} at line {first.get('line')}, col {first.get('col')}"
    return str(error)
