"""How the measuring layer writes its tables (the commands above it use the same)."""

from __future__ import annotations


def table_lines(header, rows, markdown: bool, align_last: bool = True) -> list[str]:
    """A table as lines: markdown, or plain columns right-aligned to their widest cell
    (align_last False: the last column left as it is, for long free text such as kernel names)."""
    if markdown:
        return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
                *("| " + " | ".join(r) + " |" for r in rows)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    last = len(header) - 1
    return ["  ".join(c.rjust(w) if align_last or i < last else c for i, (c, w) in enumerate(zip(r, widths)))
            for r in [header, *rows]]
