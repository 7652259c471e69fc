"""Name normalisation for matching: the rules, as (regex, replacement) pairs applied in order.

The same rules are applied in SQL (DuckDB regexp_replace, RE2 syntax) and shipped in the diff's
JSON so the diff page matches hovered slices with exactly the server's rules.
"""

from __future__ import annotations

# addresses and iteration numbers: "0x7f3a2c" -> "0x?", "ProfilerStep#12" -> "ProfilerStep#N"
BASE_RULES: tuple[tuple[str, str], ...] = (
    (r"0x[0-9a-fA-F]+", "0x?"),
    (r"#[0-9]+", "#N"),
)
# template noise (optional): everything between balanced <...>, innermost first, a few levels deep
TEMPLATE_RULE = (r"<[^<>]*>", "<>")
TEMPLATE_DEPTH = 6
# after the innermost levels collapsed to "<>", an outer "<<>, <>>" collapses too
_TEMPLATE_OUTER = (r"<(?:[^<>]|<>)*>", "<>")


def rules(strip_templates: bool = False) -> list[tuple[str, str]]:
    """The (pattern, replacement) list for one comparison, in application order."""
    out = list(BASE_RULES)
    if strip_templates:
        out += [TEMPLATE_RULE] + [_TEMPLATE_OUTER] * TEMPLATE_DEPTH
    return out


def sql_expr(column: str, strip_templates: bool = False) -> str:
    """A DuckDB expression applying the rules to `column` (patterns are ours, never a caller's)."""
    expr = column
    for pat, rep in rules(strip_templates):
        expr = f"regexp_replace({expr}, '{pat}', '{rep}', 'g')"
    return expr
