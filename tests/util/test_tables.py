"""lnbook.util.tables.Table: what a lab shows instead of a printed text table."""

from __future__ import annotations

import pytest

from lnbook.book.site_check import text_table
from lnbook.util.tables import Table, value_and_error, vector_text


def test_rows_are_formatted_by_column_and_rendered_as_html():
    t = Table([["relu", 0.7334711034621306, None], {"activation": "exp", "beta_0": 0.5819767, "exact": 0.58197670}],
              ["activation", "beta_0", "exact"], formats={"beta_0": ".4f", "exact": ".4f"})
    assert t.cells == [["relu", "0.7335", "\u2014"], ["exp", "0.5820", "0.5820"]]  # an em dash, not a hyphen
    page = t._repr_html_()
    assert page.startswith("<table") and "<th>beta_0</th>" in page and "<td class='lnbook-short'>0.7335</td>" in page
    assert "<td class='lnbook-short'>\u2014</td>" in page
    assert str(t).splitlines()[0].split() == ["activation", "beta_0", "exact"]
    assert text_table(str(t)) is not None  # its text form is what the book must not print: the page shows the HTML


def test_html_is_escaped():
    assert "<td class='lnbook-short'>a&lt;b&gt;</td>" in Table([["a<b>"]], ["x"])._repr_html_()
    assert "<td>a &lt;b&gt; and a long cell &amp; more</td>" in Table([["a <b> and a long cell & more"]], ["x"])._repr_html_()


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
    assert narrow.columns == ["x", "name"] and narrow.cells == [["0.12", "a"], ["\u2014", "b"]]
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


def test_html_keeps_short_cells_whole_and_lets_long_names_break_only_after_separators():
    """Issue 33: a cell breaks between words, never inside one. A short cell without a space is marked to stay on one
    line; another may break at its spaces and after "/", "_", "::" or a "." before a letter (a <wbr>), never inside a
    number, and a range (en dash) is kept whole; the text is the same."""
    import re

    from lnbook.util.tables import SHORT_CELL

    long = "read by aten.linear.default at encoder.layer_0/attn::qkv, a 126262880.860 and 1e-12 stay whole, 0.88\u20130.90 too"
    page = Table([["BERT (post-LN)", 1e-12, "embeddings.LayerNorm", long]], ["model", "eps", "name", "why"],
                 {"eps": ".0e"})._repr_html_()
    cells = re.findall(r"<td([^>]*)>(.*?)</td>", page)
    assert [attrs for attrs, _ in cells] == ["", " class='lnbook-short'", "", ""]
    assert len("1e-12") <= SHORT_CELL < len("embeddings.LayerNorm")
    assert cells[0][1] == "BERT (post-LN)" and cells[2][1] == "embeddings.<wbr>LayerNorm"
    assert cells[3][1] == ("read by aten.<wbr>linear.<wbr>default at encoder.<wbr>layer_<wbr>0/<wbr>attn::<wbr>qkv, "
                           "a 126262880.860 and 1e-12 stay whole, <span class='lnbook-nobreak'>0.88\u20130.90</span> too")
    assert re.sub(r"<[^>]+>", "", cells[3][1]) == long


def test_a_details_cell_folds_its_lines_under_its_summary():
    """Issue 33: the full messages behind a summarised cell stay on the page, folded (closed <details>); the text form
    and Table.cells show the summary; a Details without lines is a plain cell; bad input is refused."""
    from lnbook.util.tables import Details

    t = Table([["bert", Details("2 LayerNorms: a gain", ["the output of a.b has a gain", "the output of c has a gain"])],
               ["opt", Details("")]], ["model", "why"])
    assert t.cells == [["bert", "2 LayerNorms: a gain"], ["opt", ""]] and "2 LayerNorms: a gain" in str(t)
    page = t._repr_html_()
    assert ("<td><details><summary>2 LayerNorms: a gain</summary><ul><li>the output of a.<wbr>b has a gain</li>"
            "<li>the output of c has a gain</li></ul></details></td>") in page
    assert "<td class='lnbook-short'></td></tr>" in page and "<details open" not in page
    assert t.select(["why"])._repr_html_().count("<details>") == 1
    with pytest.raises(TypeError, match="summary is a string"):
        Details(3)
    with pytest.raises(TypeError, match="list of strings"):
        Details("s", "one string")


def test_a_lines_cell_puts_one_item_per_line_and_never_breaks_a_dotted_name():
    """Screenshot read 51, item 2: a list of module groups wrapped inside a name ("blocks.1.⏎mlp.2"). A Lines cell
    writes one item per line on the page, keeps every dotted word and range whole, and reads "a; b" as text."""
    from lnbook.util.tables import Lines

    t = Table([["linear", Lines(["attn.out in blocks 0–1", "mlp.2 in blocks 0–1"])]], ["writers", "modules"])
    assert t.cells == [["linear", "attn.out in blocks 0–1; mlp.2 in blocks 0–1"]]
    page = t._repr_html_()
    assert ("<td><span class='lnbook-nobreak'>attn.out</span> in blocks <span class='lnbook-nobreak'>0–1</span><br>"
            "<span class='lnbook-nobreak'>mlp.2</span> in blocks <span class='lnbook-nobreak'>0–1</span></td>") in page
    assert "<wbr>" not in page.split("<tbody>")[1]
    assert Lines(["a"]) == Lines(["a"]) and Lines(["a"]) != Lines(["b"])
    with pytest.raises(TypeError, match="list of strings"):
        Lines("a.b")
    with pytest.raises(ValueError, match="at least one"):
        Lines([])


def test_ranges_and_lists_of_numbers_are_written_one_way():
    """Issue 33: the labs wrote ranges "a..b", "a to b" and "a–b", and a table cell printed a numpy array. One range
    format (en dash, a minus sign for a negative end, one value when both ends print the same) and plain lists."""
    import numpy as np
    import torch

    from lnbook.util.tables import number_list, number_range

    assert number_range(0.8812, 0.9049, ".2f") == "0.88\u20130.90" and number_range(10.0, 11.0, ".1f") == "10.0\u201311.0"
    assert number_range(7, 7, "d") == "7" and number_range(0.881, 0.8849, ".2f") == "0.88"
    assert number_range(-1.5, -0.25, ".2f") == "\u22121.50\u2013\u22120.25"
    assert number_range(np.float32(5e-2), 0.2, ".0e") == "5e-02\u20132e-01"
    assert number_list(np.array([0.9912, 8.41e-3, 1.4e-6])) == "0.99, 0.0084, 1.4e-06"
    assert number_list(torch.tensor([0.5, -0.25], dtype=torch.float64), ".2f") == "0.50, \u22120.25"
    for bad, error, match in (((2, 1), ValueError, "above the high end"), ((float("nan"), 1), ValueError, "NaN"),
                              (("0.1", 1), TypeError, "real number"), ((True, 1), TypeError, "real number")):
        with pytest.raises(error, match=match):
            number_range(*bad)
    with pytest.raises(TypeError, match="sequence of numbers"):
        number_list("0.1, 0.2")


def test_powers_of_ten_are_written_for_the_text_not_in_e_notation():
    """Issue 33: glued numbers in the running text read 3.2×10⁻¹³, not 3.2e-13. The mantissa carries the digits of
    the same spec in e-notation (so the value is the e-notation one, rounded the same way), an exponent of 0 prints
    the mantissa alone, a mantissa of 1 with no digits prints the power alone; ranges and lists take the spec."""
    import numpy as np

    from lnbook.util.tables import number_list, number_range, power_of_ten

    assert power_of_ten(3.2e-13) == "3.2\u00d710\u207b\u00b9\u00b3" and power_of_ten(1e-5, ".0p") == "10\u207b\u2075"
    assert power_of_ten(9.96e-6, ".0p") == "10\u207b\u2075" and power_of_ten(9.96e-6, ".2p") == "9.96\u00d710\u207b\u2076"
    assert power_of_ten(-4.04e-1, ".0p") == "\u22124\u00d710\u207b\u00b9" and power_of_ten(2e3, ".0p") == "2\u00d710\u00b3"
    assert power_of_ten(7.5) == "7.5" and power_of_ten(0.0) == "0" and power_of_ten(np.float32(1e-4), ".0p") == "10\u207b\u2074"
    for x in (3.2e-13, 1.234e-7, 5e-2, 6.02e23):  # the text and e-notation say the same number
        text = power_of_ten(x, ".2p")
        mantissa, _, power = text.partition("\u00d710")
        back = power.translate(str.maketrans("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207b", "0123456789-"))
        assert float(f"{mantissa}e{back}") == float(f"{x:.2e}")
    assert number_range(0.1, 0.4, ".0p") == "10\u207b\u00b9\u20134\u00d710\u207b\u00b9"
    assert number_range(5e-2, 5.04e-2, ".0p") == "5\u00d710\u207b\u00b2"
    assert number_list([1e-4, 3e-3], ".0p") == "10\u207b\u2074, 3\u00d710\u207b\u00b3"
    for bad, error in (((1e-3, ".1e"), ValueError), ((1e-3, "p"), ValueError), ((float("nan"), ".1p"), ValueError),
                       ((float("inf"), ".1p"), ValueError), (("1e-3", ".1p"), TypeError)):
        with pytest.raises(error):
            power_of_ten(*bad)


def test_significant_writes_every_size_in_one_style_with_its_digits():
    """Issue 33 (ch05 Hessian lab, ch06 PLN lab): one table mixed 126262880.860, 3.218e+08, 2.0000, 2.00e+00 and -0.0.
    `significant` gives `digits` significant digits in every cell: plain from 10⁻³ to 10^digits (trailing zeros kept), a
    power of ten outside, a minus sign, 0 for zero of either sign; the digits read back to the value rounded the same
    way as e-notation."""
    import numpy as np
    import torch

    from lnbook.util.tables import significant

    assert significant(126262880.86) == "1.26\u00d710\u2078" and significant(3.218e8, 4) == "3.218\u00d710\u2078"
    assert significant(2.0) == "2.00" and significant(2.0, 5) == "2.0000" and significant(48.07) == "48.1"
    assert significant(100.0) == "100" and significant(1234.5) == "1.23\u00d710\u00b3" and significant(1234.5, 4) == "1234"
    assert significant(0.0123) == "0.0123" and significant(0.001) == "0.00100" and significant(9.9949e-4) == "9.99\u00d710\u207b\u2074"
    assert significant(9999.4) == "1.00\u00d710\u2074"  # rounds up to 10⁴: written as a power of ten
    assert significant(-0.0) == "0" and significant(0) == "0" and significant(-0.0123) == "\u22120.0123"
    assert significant(np.float32(0.5)) == "0.500" and significant(torch.tensor(1.5e-16, dtype=torch.float64)) == "1.50\u00d710\u207b\u00b9\u2076"
    back = str.maketrans("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207b\u2212", "0123456789--")
    for x in (3.2e-13, 1.234e-7, 5e-2, 0.5, 7.77, 1234.5, 6.02e23, -4.2e-9, -321.0):
        text = significant(x).translate(back)
        mantissa, _, power = text.partition("\u00d710")
        assert float(f"{mantissa}e{power or 0}") == float(f"{x:.2e}"), (x, significant(x))
        assert len(mantissa.lstrip("-").replace(".", "").lstrip("0")) == 3, (x, significant(x))
    for bad, error in (((float("nan"),), ValueError), ((float("inf"),), ValueError), ((1.0, 0), ValueError),
                       (("1.0",), TypeError), ((True,), TypeError)):
        with pytest.raises(error):
            significant(*bad)


def test_unbroken_range_has_a_word_joiner_after_each_dash_and_reads_as_number_range():
    """Screenshot reads 36 and 41: a range in a chapter's markdown table wrapped after its en dash ("2108–" / "2119").
    unbroken_range puts a word joiner right after the dash; without it the text is number_range's; equal ends give one
    value; low > high is refused."""
    import pytest

    from lnbook.util.tables import RANGE_DASH, WORD_JOINER, number_range, unbroken_range

    text = unbroken_range(2108, 2119, "d")
    assert text == "2108\u2013\u20602119" and text.replace(WORD_JOINER, "") == number_range(2108, 2119, "d")
    assert all(text[i + 1] == WORD_JOINER for i, c in enumerate(text) if c == RANGE_DASH)
    assert unbroken_range(-2.0, -1.0, ".1f") == "\u22122.0\u2013\u2060\u22121.0" and unbroken_range(1.0, 1.0, ".3f") == "1.000"
    with pytest.raises(ValueError):
        unbroken_range(2.0, 1.0, ".1f")


def test_signed_percent_has_a_sign_except_at_zero_and_a_minus_sign():
    from lnbook.util.tables import signed_percent

    assert [signed_percent(v) for v in (0.014, -0.006, 0.0, 0.0004, -0.0004)] == ["+1.4%", "\u22120.6%", "0.0%", "0.0%",
                                                                              "0.0%"]
    assert signed_percent(0.126, 0) == "+13%" and signed_percent(-0.004, 0) == "0%"
    for bad, error in ((float("nan"), ValueError), (float("inf"), ValueError), ("1", TypeError), (True, TypeError)):
        with pytest.raises(error):
            signed_percent(bad)
    with pytest.raises(ValueError, match="digits"):
        signed_percent(0.1, -1)


def test_value_and_error_gives_the_value_the_decimals_of_a_two_digit_error():
    """Screenshot read (issue 33): "3.02 ± 0.0566" and "301 ± 1.50" printed the error with more digits than the value."""
    assert value_and_error(3.0213, 0.0566) == "3.021 ± 0.057"
    assert value_and_error(301.2, 1.50) == "301.2 ± 1.5"
    assert value_and_error(6.01, 0.0801) == "6.010 ± 0.080"
    assert value_and_error(0.5, 0.0996) == "0.50 ± 0.10"  # the rounding that adds a digit to the error
    assert value_and_error(12345, 678) == "12340 ± 680"
    assert value_and_error(-0.4, 0.123) == "\u22120.40 ± 0.12"
    assert value_and_error(1e8, 3e6) == "1.00×10⁸ ± 3.0×10⁶"  # a power of ten: each part on its own
    import numpy as np
    assert value_and_error(np.float64(3.0213), np.float32(0.0566)) == "3.021 ± 0.057"


@pytest.mark.parametrize("value, error", [(1.0, -0.1), (float("nan"), 0.1), (1.0, float("inf"))])
def test_value_and_error_refuses_a_negative_or_non_finite_error(value, error):
    with pytest.raises(ValueError):
        value_and_error(value, error)


def test_vector_text_writes_a_vector_as_the_text_does():
    import torch
    assert vector_text(torch.tensor([1.22474, -1.22474, 0.0], dtype=torch.float64)) == "(1.2247, \u22121.2247, 0.0000)"
    assert vector_text([0.5, 2], decimals=1) == "(0.5, 2.0)"
    with pytest.raises(TypeError):
        vector_text([[1.0, 2.0]])


def test_whole_number_groups_five_digits_and_more_as_the_text_does():
    """Screenshot read 46: "10000" in tables beside the text's $m = 10\\,000$ and Fig 7.4's "20 000"."""
    from lnbook.util.tables import THOUSANDS, whole_number

    assert whole_number(10000) == f"10{THOUSANDS}000" and whole_number(2000) == "2000" and whole_number(9999) == "9999"
    assert whole_number(1234567) == f"1{THOUSANDS}234{THOUSANDS}567" and whole_number(-10541) == f"\u221210{THOUSANDS}541"
    with pytest.raises(ValueError):
        whole_number(2.5)


def test_a_formatted_negative_number_in_a_table_has_a_minus_sign_not_a_hyphen():
    """Table's formats give the book's minus sign (the Hessian lab's z column wrote .replace("-", MINUS) in its cell:
    screenshot read 48, item 3)."""
    from lnbook.util.tables import MINUS, Table

    table = Table([[-1.25, 0.5], [2.0, -0.04]], ["z", "w"], formats={"z": ".1f", "w": ".2f"})
    assert table.cells == [[f"{MINUS}1.2", "0.50"], ["2.0", f"{MINUS}0.04"]]
    body = table._repr_html_().split("<tbody>")[1]
    assert f">{MINUS}1.2<" in body and ">-" not in body


def test_seed_range_is_one_cell_with_every_seed_folded_under_it():
    """Screenshot read 48, item 18: three seeds' values in one cell wrapped over two lines; the range is the cell and
    each seed's value is folded under it (a Details cell), one seed giving its value alone."""
    from lnbook.util.tables import Details, Table, seed_range

    cell = seed_range([0.353, 0.355, 0.173], [0, 1, 2])
    assert isinstance(cell, Details) and cell.summary == "0.173\u20130.355"
    assert cell.lines == ("seed 0: 0.353", "seed 1: 0.355", "seed 2: 0.173")
    assert seed_range([0.5], [7]).summary == "0.500" and seed_range([-0.25, 0.5], [0, 1], ".2f").lines[0] == "seed 0: \u22120.25"
    assert "<details" in Table([["CNN", cell]], ["network", "range over seeds"])._repr_html_()
    with pytest.raises(ValueError, match="one value per seed"):
        seed_range([0.1, 0.2], [0])
