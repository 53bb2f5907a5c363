"""A manifest's dataset card as Markdown (``GET /v1/manifests/{id}/card`` with
``Accept: text/markdown``, and ``quarry manifests card``).

Text a user wrote (name, tags, description) and the curation's SQL are escaped or fenced, so
that they cannot change the card's structure.
"""

from __future__ import annotations

import json
import re
from typing import Any

MARKDOWN = "text/markdown"
_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")


def card_markdown(card: dict[str, Any]) -> str:
    """The card (:func:`curation.card.manifest_card`'s dict) as a Markdown document."""
    title = card["name"] or f"Manifest {card['manifest_id'][:12]}"
    lines = [f"# {_text(title)}", "", *_header(card), ""]
    lines += ["## Contents", ""]
    lines += _table(
        ["episodes", "slices", "samples", "hours", "success rate", "size"],
        [
            [
                card["episodes"],
                card["slices"],
                card["samples"],
                f"{card['hours']:.3f}",
                _percent(card["success_rate"]),
                f"{card['size_bytes']} bytes",
            ]
        ],
    )
    if card["episodes_described"] != card["episodes"]:
        missing = card["episodes"] - card["episodes_described"]
        lines += ["", f"{missing} episodes are not in the warehouse at the snapshot."]
    for key, title in (("by_robot", "Robots"), ("by_task", "Tasks"), ("by_site", "Sites")):
        rows = [
            [_text(g["key"]), g["episodes"], f"{g['hours']:.3f}", _percent(g["success_rate"])]
            for g in card[key]
        ]
        lines += ["", f"## {title}", "", *_table([key[3:], "episodes", "hours", "success"], rows)]
    lines += ["", "## Quality flags", ""]
    flags = [[_text(f["flag"]), f["episodes"], _percent(f["rate"])] for f in card["quality_flags"]]
    lines += _table(["flag", "episodes", "share"], flags) if flags else ["No quality flags."]
    lines += ["", "## Stamps", ""]
    stamps = [
        [
            stamp,
            f"{_text(str(r['min']))} to {_text(str(r['max']))}",
            ", ".join(f"{_text(v['version'])} ({v['episodes']})" for v in r["values"]),
        ]
        for stamp, r in card["stamps"].items()
    ]
    lines += _table(["stamp", "range", "episodes per value"], stamps)
    for field, stats in card["normalization"].items():
        lines += ["", f"## Normalization: {_text(field)} ({stats['count']} steps)", ""]
        lines += _table(["dim", "mean", "std", "min", "max"], _dimensions(stats))
    lines += ["", "## Provenance", "", *_provenance(card)]
    return "\n".join(lines) + "\n"


def _header(card: dict[str, Any]) -> list[str]:
    lines = [
        f"Manifest `{card['manifest_id']}`, format version {card['format_version']}, "
        f"created {card['created_at']} by {_text(card['author'])}."
    ]
    if card["tags"]:
        lines.append("Tags: " + ", ".join(f"`{t}`" for t in card["tags"]) + ".")
    if card["retired_at"] is not None:
        lines.append(f"Retired {card['retired_at']}.")
    if card["description"]:
        lines += [""] + ["> " + _text(line) for line in card["description"].splitlines()]
    return lines


def _dimensions(stats: dict[str, Any]) -> list[list[Any]]:
    lows, highs = stats["min"], stats["max"]
    return [
        [
            dim,
            f"{mean:.6g}",
            f"{std:.6g}",
            "" if lows is None else f"{lows[dim]:.6g}",
            "" if highs is None else f"{highs[dim]:.6g}",
        ]
        for dim, (mean, std) in enumerate(zip(stats["mean"], stats["std"], strict=True))
    ]


def _provenance(card: dict[str, Any]) -> list[str]:
    position = card["cdc_position"]
    where = "none recorded"
    if position is not None:
        where = ", ".join(f"{k} {_text(str(v))}" for k, v in sorted(position.items()))
    return [
        f"- Warehouse snapshot: {card['snapshot_id']}",
        f"- CDC position: {where}",
        "- Sample spec:",
        "",
        *_fenced(json.dumps(card["sample_spec"], indent=2, sort_keys=True), "json"),
        "",
        "- SQL:",
        "",
        *_fenced(card["sql"], "sql"),
    ]


def _fenced(text: str, language: str) -> list[str]:
    """``text`` in a code fence longer than any run of backticks inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{language}", *text.splitlines(), fence]


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    if not rows:
        return ["None."]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def _text(value: str) -> str:
    """User text on one line with Markdown's special characters escaped."""
    return _SPECIAL.sub(r"\\\1", " ".join(value.split()))


def _percent(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.1%}"
