"""Counts in messages agree with their number."""

from setattn.wording import counted


def test_one_is_singular_and_the_rest_plural():
    assert counted(1, "row") == "1 row"
    assert counted(0, "row") == "0 rows"
    assert counted(12_345, "valid molecule") == "12,345 valid molecules"
    assert counted(2, "query", "queries") == "2 queries"
    assert counted(1, "query", "queries") == "1 query"
