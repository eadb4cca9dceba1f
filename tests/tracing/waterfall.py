"""Exported spans drawn as a waterfall (one HTML page, an SVG of bars and link curves), for the picture
in docs/guides/tracing.md. Each trace is drawn on its own time scale: a run and its unwind may be days
apart. A span link is a dashed curve from the linking span's bar to the bar it links to."""

from __future__ import annotations

import html
from collections.abc import Sequence

from .spans import Seen

ROW = 30
LABEL_W = 330
BAR_W = 520
NOTE_W = 330
WIDTH = LABEL_W + BAR_W + NOTE_W + 40
TITLE_H = 34


def _colour(span: Seen) -> str:
    status = str(span.attributes.get("saga.compensation.status", ""))
    if span.status == "ERROR":
        return "#d9534f"
    if span.name.startswith("saga.compensate"):
        return "#5cb85c" if status == "compensated" else "#9aa5b1"
    if span.name.startswith("saga.unwind"):
        return "#7b61c9"
    if span.name.startswith("saga.recover"):
        return "#f0ad4e"
    if span.name.startswith("run/") or span.name.startswith("apply_async/"):
        return "#c9ced6"
    return "#3f7fd1"


def _note(span: Seen) -> str:
    a = span.attributes
    if span.name.startswith("saga.compensate"):
        text = str(a.get("saga.compensation.status", ""))
        if a.get("saga.compensation.error"):
            text += f" ({str(a['saga.compensation.error']).split(':', 1)[0]})"
        return text
    if span.name.startswith("execute_tool"):
        return f"{a.get('saga.call.outcome', '')}, key {a.get('saga.call.key', '')}"
    if span.name == "saga.unwind":
        counts = [
            f"{k.rsplit('.', 1)[1]} {v}" for k, v in sorted(a.items()) if k.startswith("saga.unwind.count.")
        ]
        return ", ".join(counts)
    if span.name == "saga.run":
        return f"run {a.get('saga.run.id', '')}: {a.get('saga.run.status', '')}"
    return ""


def _order(spans: Sequence[Seen]) -> list[tuple[Seen, int]]:
    """Depth-first, children by start time: each span with its depth."""
    ids = {s.span_id for s in spans}
    children: dict[int | None, list[Seen]] = {}
    for s in spans:
        children.setdefault(s.parent_id if s.parent_id in ids else None, []).append(s)
    out: list[tuple[Seen, int]] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda x: x.start):
            out.append((s, depth))
            walk(s.span_id, depth + 1)

    walk(None, 0)
    return out


def render(traces: Sequence[tuple[str, Sequence[Seen]]]) -> str:
    """An HTML page drawing each ``(title, spans)`` trace, and every link between their spans."""
    parts: list[str] = []
    where: dict[tuple[int, int], tuple[float, float, float]] = {}  # span -> (x0, x1, y middle)
    y = 10.0
    rows: list[tuple[Seen, float, float, float]] = []
    for title, spans in traces:
        parts.append(
            f'<text x="10" y="{y + 20}" class="title">{html.escape(title)}</text>'
            f'<line x1="10" x2="{WIDTH - 10}" y1="{y + 28}" y2="{y + 28}" class="rule"/>'
        )
        y += TITLE_H
        t0 = min(s.start for s in spans)
        t1 = max(s.end for s in spans)
        scale = BAR_W / max(1, t1 - t0)
        for span, depth in _order(spans):
            x0 = LABEL_W + (span.start - t0) * scale
            x1 = max(x0 + 3, LABEL_W + (span.end - t0) * scale)
            label = html.escape(span.name)
            ms = (span.end - span.start) / 1e6
            parts.append(
                f'<text x="{14 + depth * 16}" y="{y + 19}" class="name">{label}</text>'
                f'<rect x="{x0:.1f}" y="{y + 7}" width="{x1 - x0:.1f}" height="{ROW - 14}" rx="3" '
                f'fill="{_colour(span)}"/>'
                f'<text x="{x1 + 6:.1f}" y="{y + 19}" class="ms">{ms:.1f} ms</text>'
                f'<text x="{LABEL_W + BAR_W + 60}" y="{y + 19}" class="note">{html.escape(_note(span))}</text>'
            )
            where[span.ids] = (x0, x1, y + ROW / 2)
            rows.append((span, x0, x1, y + ROW / 2))
            y += ROW
        y += 18
    kinds: set[str] = set()
    for span, x0, _x1, ym in rows:
        for trace_id, span_id, attrs in span.links:
            target = where.get((trace_id, span_id))
            if target is None:
                continue
            tx0, _tx1, ty = target
            bend = LABEL_W - 40
            parts.append(
                f'<path d="M {x0:.1f} {ym:.1f} C {bend} {ym:.1f}, {bend} {ty:.1f}, {tx0:.1f} {ty:.1f}" '
                f'class="link" marker-end="url(#arrow)"/>'
            )
            kinds.add(str(attrs.get("saga.link.type", "link")))
    if kinds:
        parts.append(
            f'<path d="M 14 {y + 4} L 60 {y + 4}" class="legendlink" marker-end="url(#arrow)"/>'
            f'<text x="70" y="{y + 8}" class="legend">span link ({html.escape(", ".join(sorted(kinds)))}): '
            "from a compensate span to the execute span of the effect it undoes</text>"
        )
        y += 20
    height = int(y + 10)
    style = """
      body { margin: 0; background: #fff; font-family: 'DejaVu Sans', Arial, sans-serif; }
      .title { font-size: 15px; font-weight: bold; fill: #1f2933; }
      .rule { stroke: #d2d6dc; }
      .name { font-size: 12.5px; fill: #1f2933; font-family: 'DejaVu Sans Mono', monospace; }
      .ms { font-size: 11px; fill: #616e7c; }
      .note { font-size: 11.5px; fill: #323f4b; }
      .link { fill: none; stroke: #e8590c; stroke-width: 1.6; stroke-dasharray: 5 3; }
      .legend { font-size: 12px; fill: #e8590c; }
      .legendlink { fill: none; stroke: #e8590c; stroke-width: 1.6; stroke-dasharray: 5 3; }
    """
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style></head><body>"
        f'<svg id="waterfall" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}">'
        '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
        '<path d="M0,0 L8,4 L0,8 z" fill="#e8590c"/></marker></defs>'
        + "".join(parts)
        + "</svg></body></html>"
    )
