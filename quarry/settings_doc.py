"""The settings reference page, docs/settings.md, generated from the pydantic models so that it
cannot drift: every field, its environment variable (or trainer key), type, default and
description (the field's ``description``, else the model docstring's ``:param name:`` line).

``python -m quarry.settings_doc`` rewrites the page; ``--check`` exits 1 when it is stale
(``make settings-doc`` does the first, a test the second).
"""

from __future__ import annotations

import argparse
import re
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from quarry.settings import Settings
from service.settings import ServiceSettings
from trainer.config import TrainerConfig
from warehouse.config import ClickHouseConfig, DuckLakeConfig

REPO_ROOT = Path(__file__).resolve().parents[1]
PAGE = REPO_ROOT / "docs" / "settings.md"
_PARAM = re.compile(r":param (\w+):")
_PARAM_END = re.compile(r":param \w+:|\n\s*:\w+|\n\s*\n")
# Defaults a model validator fills in from other fields (the page cannot read them off a field).
DERIVED_DEFAULTS = {
    "loader.cache.root": "`<state_dir>/cache`",
    "loader.seed": "`seed`",
}

HEADER = """\
# Settings reference

Generated from the pydantic models by `python -m quarry.settings_doc` (`make settings-doc`);
do not edit by hand: `tests/quarry/test_settings_doc.py` fails when this page is stale.

Every `quarry` process (each command, `quarry serve`, `quarry cdc follow`) reads
`quarry.settings.Settings`; `python -m cdc` reads `cdc.settings.FollowerSettings`, its
`QUARRY_SOURCE_DSN`, `QUARRY_CDC__*` and `QUARRY_WAREHOUSE__*` part. Values come from the
command's flags, then environment variables `QUARRY_<SECTION>__<FIELD>` (case does not
matter), then the defaults; nothing reads the environment at import time.
A secret is set through the environment only, never a flag. The warehouse section is
DuckLake's unless `QUARRY_WAREHOUSE__BACKEND=clickhouse`. The HTTP app's own settings
(`service.settings.ServiceSettings`) are resolved from these by `quarry serve`, and a
trainer rank's (`trainer.config.TrainerConfig`) by `quarry train` from its flags,
`--set key.path=value` and `--config FILE` (no environment variables).
"""


@dataclass(frozen=True)
class Row:
    """One documented field."""

    name: str
    type: str
    default: str
    description: str


def _docstring_params(model: type[BaseModel]) -> dict[str, str]:
    """``:param name: text`` entries of the model's docstring; an entry ends at the next
    ``:param``, another field list entry or a blank line."""
    doc = model.__doc__ or ""
    params: dict[str, str] = {}
    doc = re.sub(r":(?:mod|class|func|meth|attr):`~?([\w.]+)`", r"``\1``", doc)
    for match in _PARAM.finditer(doc):
        rest = doc[match.end() :]
        end = _PARAM_END.search(rest)
        params[match.group(1)] = " ".join(rest[: end.start() if end else len(rest)].split())
    return params


def type_name(annotation: Any) -> str:
    """A reader's name for a field's type: ``int``, ``path``, ``secret``, ``a | b``."""
    if annotation is type(None):
        return "none"
    if annotation is SecretStr:
        return "secret"
    if annotation is Path:
        return "path"
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " \\| ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(
            "..." if a is Ellipsis else type_name(a) for a in typing.get_args(annotation)
        )
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation))


def default_text(info: FieldInfo) -> str:
    """The field's default as the page shows it; paths inside the checkout as ``<repo>/...``."""
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, Enum):
        value = value.value
    text = str(value) if isinstance(value, Path) else repr(value)
    return "`" + text.replace(str(REPO_ROOT), "<repo>") + "`"


def _section_of(info: FieldInfo) -> type[BaseModel] | None:
    annotation = info.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def walk(
    model: type[BaseModel],
    prefix: str,
    sep: str,
    skip: frozenset[str] = frozenset(),
    *,
    upper: bool = False,
) -> Iterator[Row]:
    """Rows of ``model``'s fields, nested sections flattened as ``prefix + a + sep + b``
    (upper-cased, as environment variables are written, when ``upper``)."""
    params = _docstring_params(model)
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        section = _section_of(info)
        if section is not None:
            yield from walk(section, f"{prefix}{name}{sep}", sep, upper=upper)
            continue
        key = f"{prefix}{name}"
        if upper:
            key = key.upper()
        description = (info.description or params.get(name, "")).replace("``", "`")
        default = DERIVED_DEFAULTS.get(key) or default_text(info)
        yield Row(key, type_name(info.annotation), default, description)


def table(rows: list[Row], key_title: str) -> str:
    """``rows`` as a Markdown table whose first column is titled ``key_title``."""
    lines = [f"| {key_title} | type | default | description |", "|---|---|---|---|"]
    for row in rows:
        description = " ".join(row.description.split()).replace("|", "\\|")
        lines.append(f"| `{row.name}` | {row.type} | {row.default} | {description} |")
    return "\n".join(lines)


def _env_table(model: type[BaseModel], prefix: str, skip: frozenset[str] = frozenset()) -> str:
    return table(list(walk(model, prefix, "__", skip, upper=True)), "environment")


def render() -> str:
    """The whole page."""
    service_skip = frozenset({"service", "curation", "warehouse"})
    parts = [
        HEADER,
        "## `quarry` processes (`quarry.settings.Settings`)\n",
        _env_table(Settings, "QUARRY_", frozenset({"warehouse"})),
        "\n## Warehouse: DuckLake (`warehouse.config.DuckLakeConfig`, the default)\n",
        _env_table(DuckLakeConfig, "QUARRY_WAREHOUSE__"),
        "\n## Warehouse: ClickHouse (`warehouse.config.ClickHouseConfig`)\n",
        _env_table(ClickHouseConfig, "QUARRY_WAREHOUSE__"),
        "\n## The HTTP app (`service.settings.ServiceSettings`, resolved by `quarry serve`)\n",
        "Its `service`, `curation` and `warehouse` sections are the ones above; these fields are "
        "resolved from the state folder.\n",
        table(list(walk(ServiceSettings, "", ".", service_skip)), "field"),
        "\n## A trainer rank (`trainer.config.TrainerConfig`: `--set key=value`, `--config`)\n",
        table(list(walk(TrainerConfig, "", ".")), "key"),
    ]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quarry.settings_doc", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    parser.add_argument("--out", type=Path, default=PAGE, help="the page (docs/settings.md)")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != page:
            print(f"{args.out} is stale: run python -m quarry.settings_doc", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
