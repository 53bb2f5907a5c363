"""``quarry manifests diff`` as a person reads it: counts side by side, the episodes that came
and went, and each changed metadata key in its own terms (the SQL line by line, the sample
spec key by key, the CDC position by LSN, normalization as mean and std per dimension).
``--json`` prints :meth:`manifests.diff.ManifestDiff.to_dict` instead."""

from __future__ import annotations

import difflib
import json
from typing import Any

from manifests.diff import ManifestDiff
from manifests.errors import ManifestFormatError
from manifests.stats import FieldStats

#: Episode IDs listed per kind (added, removed, changed) before "and N more".
SHOWN_IDS = 5


def describe_diff(a_id: str, b_id: str, diff: ManifestDiff) -> str:
    """The readable diff of manifest ``a_id`` (old) and ``b_id`` (new)."""
    lines = [f"a  {a_id}", f"b  {b_id}", ""]
    lines += _counts(diff)
    lines.append("")
    lines += _episodes(diff)
    if not diff.metadata:
        lines += ["", "metadata: identical"]
    for key, (a, b) in diff.metadata.items():
        lines += ["", f"{key}:", *_indent(_metadata(key, a, b))]
    return "\n".join(lines)


def _counts(diff: ManifestDiff) -> list[str]:
    rows = [("rows", *diff.rows), ("samples", *diff.samples)]
    lines = [f"{'':<9} {'a':>12} {'b':>12} {'change':>12}"]
    for what, a, b in rows:
        lines.append(f"{what:<9} {a:>12} {b:>12} {_change(a, b):>12}")
    return lines


def _change(a: float, b: float) -> str:
    delta = b - a
    if delta == 0:
        return "="
    share = f" ({delta / a:+.1%})" if a else ""
    return f"{delta:+g}{share}"


def _episodes(diff: ManifestDiff) -> list[str]:
    lines = [
        f"episodes: {len(diff.added)} added, {len(diff.removed)} removed, "
        f"{len(diff.changed)} changed, {diff.unchanged} unchanged"
    ]
    for kind, ids in (("added", diff.added), ("removed", diff.removed), ("changed", diff.changed)):
        if ids:
            more = f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else ""
            lines.append(f"  {kind:<8} {', '.join(ids[:SHOWN_IDS])}{more}")
    return lines


def _metadata(key: str, a: Any, b: Any) -> list[str]:
    if key == "sql":
        return _text_diff(str(a), str(b))
    if key == "norm_stats" and isinstance(a, dict) and isinstance(b, dict):
        return _norm_stats(a, b)
    if key == "cdc_position":
        return [f"{_position(a)} -> {_position(b)}"]
    if isinstance(a, dict) and isinstance(b, dict):
        return _keys(a, b)
    return [f"{_value(a)} -> {_value(b)}"]


def _text_diff(a: str, b: str) -> list[str]:
    lines = difflib.unified_diff(a.splitlines(), b.splitlines(), "a", "b", lineterm="", n=1)
    return [line for line in lines if not line.startswith(("---", "+++"))]


def _keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [
        f"{k}: {_value(a.get(k, '(none)'))} -> {_value(b.get(k, '(none)'))}"
        for k in sorted(a.keys() | b.keys())
        if a.get(k) != b.get(k)
    ]


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _position(value: Any) -> str:
    """A CDC position by its LSN (a version-1 manifest records the object's JSON text)."""
    if isinstance(value, str):
        text = value
        try:
            value = json.loads(text)
        except ValueError:
            return text
    if not isinstance(value, dict):
        return _value(value)
    lsn = value.get("lsn_text") or value.get("lsn")
    return f"lsn {lsn}" + (f", tx {value['tx_id']}" if value.get("tx_id") is not None else "")


def _norm_stats(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Per field: steps counted, then mean and std (population) of each dimension."""
    lines: list[str] = []
    for name in sorted(a.keys() | b.keys()):
        if a.get(name) == b.get(name):
            continue
        left, right = _stats(name, a.get(name)), _stats(name, b.get(name))
        if left is None or right is None or left.dim != right.dim:
            lines.append(f"{name}: {_shape(left)} -> {_shape(right)}")
            continue
        lines.append(f"{name}: steps {left.count} -> {right.count}")
        lines.append(f"  {'dim':>4} {'mean a':>11} {'mean b':>11} {'std a':>11} {'std b':>11}")
        means, stds = (left.mean(), right.mean()), (left.std(), right.std())
        for d in range(left.dim):
            lines.append(
                f"  {d:>4} {means[0][d]:>11.5g} {means[1][d]:>11.5g} "
                f"{stds[0][d]:>11.5g} {stds[1][d]:>11.5g}"
            )
    return lines


def _stats(name: str, data: Any) -> FieldStats | None:
    try:
        return None if data is None else FieldStats.from_dict(name, data)
    except ManifestFormatError:
        return None


def _shape(stats: FieldStats | None) -> str:
    if stats is None:
        return "(none)"
    return f"{stats.dim} dimension{'s' if stats.dim != 1 else ''} over {stats.count} steps"


def _indent(lines: list[str]) -> list[str]:
    return [f"  {line}" for line in lines]
