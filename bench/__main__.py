"""``python -m bench`` (``make bench``): saga-worker's costs, each next to the floor it is bounded by.

python -m bench                      # the full run (under ~10 minutes on 2 cores)
python -m bench --quick              # a fast pass with smaller counts
python -m bench --only floors,inprocess --backends sqlite
python -m bench --markdown out.md    # also write the tables as Markdown (for bench/README.md)
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
import traceback

from rich.console import Console
from rich.table import Table as RichTable

from bench.common import Row, Table
from bench.config import Config

GROUPS = (
    "commits",
    "peers",
    "concurrency",
    "floors",
    "inprocess",
    "fsyncs",
    "profile",
    "scaling",
    "distributed",
    "memory",
    "tracing",
    "parallel",
)


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cells(row: Row) -> list[str]:
    ratio = "—" if row.ratio is None else f"{row.ratio:.2f}x"
    verdict = "" if row.ok is None else ("met" if row.ok else "MISSED")
    target = f"{row.target} {verdict}".strip()
    floor = f"{_num(row.floor)} ({row.floor_name})" if row.floor is not None else row.floor_name or "—"
    return [
        row.name,
        f"{_num(row.value)} {row.unit}" if row.value is not None else "pending",
        floor,
        ratio,
        target,
        row.note,
    ]


HEADERS = ["measure", "value", "floor (same run)", "cost vs floor", "target", "note"]


def render(console: Console, table: Table) -> None:
    out = RichTable(title=table.title, caption=table.caption or None, title_justify="left")
    for header in HEADERS:
        out.add_column(header, overflow="fold")
    for row in table.rows:
        style = "red" if row.ok is False else None
        out.add_row(*_cells(row), style=style)
    console.print(out)


def markdown(tables: list[Table]) -> str:
    lines: list[str] = []
    for table in tables:
        lines += [f"#### {table.title}", ""]
        if table.caption:
            lines += [f"_{table.caption}_", ""]
        lines.append("| " + " | ".join(HEADERS) + " |")
        lines.append("|" + "---|" * len(HEADERS))
        for row in table.rows:
            lines.append("| " + " | ".join(c.replace("|", "/") for c in _cells(row)) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a fast pass")
    parser.add_argument(
        "--only", default=",".join(GROUPS), help=f"comma-separated groups of {', '.join(GROUPS)}"
    )
    parser.add_argument("--backends", default="", help="comma-separated journals: memory, sqlite, postgres")
    parser.add_argument(
        "--rss-unwinds", type=int, metavar="N", help="unwinds in the memory group (issue 6: 10000)"
    )
    parser.add_argument(
        "--pyinstrument", action="store_true", help="profile group: also print pyinstrument's tree"
    )
    parser.add_argument("--markdown", metavar="FILE", help="also write the tables as Markdown to FILE")
    args = parser.parse_args(argv)
    groups = [g.strip() for g in args.only.split(",") if g.strip()]
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    cfg = Config.make(args.quick, backends)
    if args.pyinstrument:
        cfg.extra["pyinstrument"] = "1"
    if args.rss_unwinds:
        cfg.rss_unwinds = args.rss_unwinds

    console = Console(width=None if sys.stdout.isatty() else 200)
    started = time.perf_counter()
    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    console.print(
        f"[bold]saga-worker bench[/] ({'quick' if cfg.quick else 'full'}) on {platform.node()}: "
        f"Python {platform.python_version()}, {_cpus()} CPUs; `{command.strip()}`"
    )
    tables: list[Table] = []
    failed = False
    for group in groups:
        t0 = time.perf_counter()
        try:
            module = importlib.import_module(f"bench.{group}")
            produced = module.run(cfg)
        except Exception:
            failed = True
            console.print(f"[red]group {group} failed:[/]")
            console.print(traceback.format_exc())
            continue
        for table in produced:
            render(console, table)
        tables.extend(produced)
        console.print(f"[dim]{group}: {time.perf_counter() - t0:.0f} s[/]")
    console.print(f"[dim]total {time.perf_counter() - started:.0f} s[/]")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as fh:
            fh.write(
                f"`{command.strip()}` — {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                f"{_cpus()} CPUs, {time.perf_counter() - started:.0f} s\n\n"
            )
            fh.write(markdown(tables))
    return 1 if failed else 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
