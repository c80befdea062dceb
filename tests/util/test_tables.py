"""lnbook.util.tables.Table: what a lab shows instead of a printed text table."""

from __future__ import annotations

import pytest

from lnbook.book.site_check import text_table
from lnbook.util.tables import Table


def test_rows_are_formatted_by_column_and_rendered_as_html():
    t = Table([["relu", 0.7334711034621306, None], {"activation": "exp", "beta_0": 0.5819767, "exact": 0.58197670}],
              ["activation", "beta_0", "exact"], formats={"beta_0": ".4f", "exact": ".4f"})
    assert t.cells == [["relu", "0.7335", "-"], ["exp", "0.5820", "0.5820"]]
    page = t._repr_html_()
    assert page.startswith("<table") and "<th>beta_0</th>" in page and "<td>0.7335</td>" in page and "<td>-</td>" in page
    assert str(t).splitlines()[0].split() == ["activation", "beta_0", "exact"]
    assert text_table(str(t)) is not None  # its text form is what the book must not print: the page shows the HTML


def test_html_is_escaped():
    assert "<td>a &lt;b&gt;</td>" in Table([["a <b>"]], ["x"])._repr_html_()


@pytest.mark.parametrize(
    "rows, columns, formats, error, match",
    [
        ([[1]], [], None, TypeError, "non-empty list of column names"),
        ([[1]], "ab", None, TypeError, "non-empty list of column names"),
        ([[1, 2]], ["a", "a"], None, ValueError, "distinct"),
        ([[1]], ["a"], {"b": ".2f"}, ValueError, "does not have"),
        ([[1]], ["a"], {"a": 2}, TypeError, "format spec"),
        ("ab", ["a"], None, TypeError, "list of rows"),
        ([[1, 2]], ["a"], None, ValueError, "row 0 has 2 values for 1 columns"),
        ([{"b": 1}], ["a"], None, ValueError, "row 0 lacks the columns"),
        ([5], ["a"], None, TypeError, "row 0 must be"),
        ([[True]], ["a"], {"a": ".2f"}, TypeError, "for numbers"),
        ([[1.5]], ["a"], {"a": "d"}, ValueError, "cannot format"),
    ],
)
def test_bad_tables_are_refused_with_the_reason(rows, columns, formats, error, match):
    with pytest.raises(error, match=match):
        Table(rows, columns, formats=formats)


def test_columns_are_read_selected_and_inserted_as_given():
    """column returns the values as given (not formatted); select keeps the rows and the formats of the columns
    it keeps; insert adds one value per row at a position; unknown names and wrong lengths are refused."""
    table = Table([["a", 0.12345, 3], ["b", None, 4]], ["name", "x", "n"], {"x": ".2f"})
    assert table.column("x") == [0.12345, None] and len(table) == 2
    narrow = table.select(["x", "name"])
    assert narrow.columns == ["x", "name"] and narrow.cells == [["0.12", "a"], ["-", "b"]]
    table.insert(1, "loss", ["0.5", "-"])
    assert table.columns == ["name", "loss", "x", "n"] and table.cells[0] == ["a", "0.5", "0.12", "3"]
    assert table.column("n") == [3, 4] and "<th>loss</th>" in table._repr_html_()
    with pytest.raises(KeyError, match="no column 'y'"):
        table.column("y")
    with pytest.raises(KeyError, match=r"no columns \['y'\]"):
        table.select(["y"])
    with pytest.raises(ValueError, match="one value per row"):
        table.insert(0, "z", [1])
    with pytest.raises(ValueError, match="exists already"):
        table.insert(0, "x", [1, 2])
