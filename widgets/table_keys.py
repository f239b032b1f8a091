"""The key of a DataTable's highlighted row, for the screens that list things by id."""

from __future__ import annotations

from textual.coordinate import Coordinate
from textual.widgets import DataTable


def highlighted_key(table: DataTable) -> str | None:
    """The row key under the cursor; None when the table is empty or the cursor is off its rows."""
    if table.row_count == 0 or table.cursor_row is None:
        return None
    try:
        key = table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value
    except LookupError:
        return None
    return None if key is None else str(key)
