"""Tables that stay readable at any terminal width, 80 columns and pipes included.

Identifiers (task names, kernel names, paths) are never cut. A table whose identifier columns at full
width and other columns at their longest word do not fit the console is printed as a list instead: one
block per row, the identifier on its own line and each other cell as `column: value` under it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Col:
    name: str
    ident: bool = False        # never cut or folded: a name the user copies (task, kernel, path)
    justify: str = "left"
    inline: bool = False       # list layout: shown on the row's first line, after the identifier


def _plain(cell: Any) -> str:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(str(cell)).plain


def _longest_word(cell: Any) -> int:
    return max((len(w) for w in _plain(cell).replace(",", " ").split()), default=1)


def fits(console: Any, cols: Sequence[Col], rows: Sequence[Sequence[Any]]) -> bool:
    """Whether a boxed table with these rows fits the console without cutting an identifier."""
    need = 1
    for i, c in enumerate(cols):
        cells = [r[i] for r in rows] + [c.name]
        if c.ident:
            w = max(max(len(line) for line in _plain(x).splitlines() or [""]) for x in cells)
        else:
            w = max(_longest_word(x) for x in cells)
        need += w + 3          # one space each side and a border
    return need <= console.width


def print_table(console: Any, title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Any]],
                empty: str = "-") -> None:
    """A rich table when it fits, else the list layout; cells equal to `empty` are left out of lists."""
    from rich.table import Table
    from rich.text import Text

    if fits(console, cols, rows):
        t = Table(title=title)
        for c in cols:
            if c.ident:
                width = max(len(_plain(x)) for x in [r[cols.index(c)] for r in rows] + [c.name])
                t.add_column(c.name, no_wrap=True, min_width=width, justify=c.justify)
            else:
                t.add_column(c.name, overflow="fold", justify=c.justify)
        for r in rows:
            t.add_row(*r)
        console.print(t)
        return
    if title:
        console.print(Text(title, style="italic"))
    for r in rows:
        head = r[0].copy() if isinstance(r[0], Text) else Text.from_markup(str(r[0]))
        head.stylize("bold")
        for c, cell in zip(cols[1:], r[1:], strict=True):
            if c.inline:
                head.append("  ").append_text(cell.copy() if isinstance(cell, Text) else Text.from_markup(str(cell)))
        console.print(head, soft_wrap=True)
        # Short cells share a line ("name value · name value"); long ones and identifiers get their own.
        line: Text | None = None
        for c, cell in zip(cols[1:], r[1:], strict=True):
            value = cell.copy() if isinstance(cell, Text) else Text.from_markup(str(cell))
            if c.inline or value.plain in (empty, f"{empty}/{empty}", ""):
                continue
            item = Text(f"{c.name} ", style="dim")
            item.append_text(value)
            own = c.ident or "\n" in value.plain or len(item) > SHORT
            if line is not None and (own or len(line) + 3 + len(item) > console.width):
                console.print(line, overflow="fold")
                line = None
            if own:
                # an identifier is printed whole on one line, for copying; other long values wrap
                if c.ident:
                    console.print(Text("  ").append_text(item), soft_wrap=True)
                else:
                    console.print(Text("  ").append_text(item), overflow="fold")
            elif line is None:
                line = Text("  ").append_text(item)
            else:
                line.append(" · ", style="dim").append_text(item)
        if line is not None:
            console.print(line, overflow="fold")


SHORT = 28     # a list-layout cell this long or shorter shares its line with its neighbours
