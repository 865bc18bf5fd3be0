"""Tests for the RepoFix bug injector (agentgym_envs.repofix.mutate)."""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym_envs.repofix.mutate import (
    CLASSIC_KINDS,
    MutationKind,
    Site,
    apply,
    apply_many,
    describe_symptom,
    find_sites,
    sample_sites,
)

K = MutationKind
SAMPLE = '''\
"""Shapes and totals: 1 + 2 < 3 here is documentation, not code."""

LIMIT = 10  # module level: never mutated


def area(width, height):
    return width * height  # the product


def total(items):
    acc = 0
    for i in range(1, len(items)):
        acc += items[i]  # skips the header row
    return acc


def classify(x, lo=0):
    if x < lo:
        return "low"
    elif x >= 100:
        return "high"
    else:
        return "mid"


def scaled(w, h):
    return area(h, w) if w and h else 0
'''
OTHER = """\
def double(n):
    return n * 2


def first_even(values):
    for v in values:
        if v % 2 == 0:
            return v
    return None
"""
FILES = {"shapes/core.py": SAMPLE, "shapes/util.py": OTHER}
TOKEN_KINDS = {K.OPERATOR_FLIP, K.COMPARISON_OFF_BY_ONE, K.WRONG_CONSTANT, K.SWAPPED_ARGUMENTS}


def _site(source: str, function: str, detail: str, path: str = "shapes/core.py") -> Site:
    """The first site in ``function`` with this detail."""
    matches = [s for s in find_sites(source, path) if (s.function, s.detail) == (function, detail)]
    assert matches, (function, detail)
    return matches[0]


# -- finding sites --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "function", "detail", "mutated_line"),
    [
        (K.OPERATOR_FLIP, "area", "* -> /", "    return width / height  # the product"),
        (K.OPERATOR_FLIP, "total", "+= -> -=", "        acc -= items[i]  # skips the header row"),
        (K.OPERATOR_FLIP, "scaled", "and -> or", "    return area(h, w) if w or h else 0"),
        (K.COMPARISON_OFF_BY_ONE, "classify", "< -> <=", "    if x <= lo:"),
        (K.COMPARISON_OFF_BY_ONE, "classify", ">= -> >", "    elif x > 100:"),
        (
            K.RANGE_OFF_BY_ONE,
            "total",
            "range(a, b) -> range(a, b - 1)",
            "    for i in range(1, len(items) - 1):",
        ),
        (
            K.RANGE_OFF_BY_ONE,
            "total",
            "range(a, b) -> range(a + 1, b)",
            "    for i in range(1 + 1, len(items)):",
        ),
        (
            K.SWAPPED_ARGUMENTS,
            "scaled",
            "area: arguments 1 and 2 swapped",
            "    return area(w, h) if w and h else 0",
        ),
        (K.REMOVED_BRANCH, "classify", "if body -> pass", "        pass"),
        (K.REMOVED_RETURN, "total", "return expr -> return None", "    return None"),
        (K.REMOVED_RETURN, "classify", "early return deleted", "        pass"),
        (K.WRONG_CONSTANT, "total", "0 -> 1", "    acc = 1"),
        (K.WRONG_CONSTANT, "total", "1 -> 2", "    for i in range(2, len(items)):"),
        (K.WRONG_CONSTANT, "classify", "100 -> 99", "    elif x >= 99:"),
        (K.INVERTED_CONDITION, "classify", "if c -> if not c", "    if not x < lo:"),
        (K.INVERTED_CONDITION, "classify", "elif c -> elif not c", "    elif not x >= 100:"),
        (
            K.INVERTED_CONDITION,
            "scaled",
            "x if c else y -> x if not c else y",
            "    return area(h, w) if not (w and h) else 0",
        ),
    ],
)
def test_each_kind_is_found_with_its_detail(
    kind: MutationKind, function: str, detail: str, mutated_line: str
) -> None:
    site = _site(SAMPLE, function, detail)
    assert site.kind is kind
    mutation = apply(SAMPLE, site)
    lines = mutation.mutated.splitlines()
    assert mutated_line in lines[site.lineno - 1 : site.lineno + 1]  # a body is one line down


def test_removing_an_elif_arm_and_the_range_of_one_argument() -> None:
    mutated = apply(SAMPLE, _site(SAMPLE, "classify", "elif arm deleted")).mutated
    assert 'return "high"' not in mutated and "elif" not in mutated
    assert '        return "low"\n    else:\n        return "mid"\n' in mutated
    source = "def f(n):\n    return sum(range(n))\n"
    site = _site(source, "f", "range(n) -> range(n - 1)", "m.py")
    assert apply(source, site).mutated == "def f(n):\n    return sum(range(n - 1))\n"


def test_sites_are_ordered_and_indexed_per_kind() -> None:
    sites = find_sites(SAMPLE, "shapes/core.py")
    assert sites == sorted(sites, key=lambda s: (s.lineno, s.col, list(K).index(s.kind)))
    for kind in K:
        assert [s.index for s in sites if s.kind is kind] == list(
            range(sum(s.kind is kind for s in sites))
        )
    assert len({s.key for s in sites}) == len(sites)
    assert sites[0].key.startswith("shapes/core.py:area:")
    assert {s.kind for s in sites} == set(CLASSIC_KINDS)  # SAMPLE has none of the others


def test_qualified_function_names_for_methods_and_nested_functions() -> None:
    source = (
        "class Box:\n"
        "    def grow(self, n):\n"
        "        def step(k):\n"
        "            return k + 1\n"
        "        return step(n)\n"
    )
    names = {s.function for s in find_sites(source, "box.py")}
    assert names == {"Box.grow", "Box.grow.step"}


# -- exclusions -----------------------------------------------------------------------------

EXCLUDED = '''\
"""Docs: 1 + 2 < 3 if x else range(4)."""
import functools
import logging

logger = logging.getLogger(__name__)
LIMIT = 1 + 2
if LIMIT > 2:
    LIMIT = len(range(5))


@functools.lru_cache(maxsize=128)
def f(x: "list[int]" = [1, 2], y: int = 3 - 1, *, z: float = 0.5 * 2) -> Annotated[int, 7]:
    """Docstring: return x + 1 if y < 2."""
    n: Annotated[int, 9] = len(x)
    assert n < 10, "too long"
    print(n + 1)
    logger.info("n=%d", n - 1)
    label = f"{n + 1} items"
    if n >= 0:
        raise ValueError(n + 1)
    return n


class C:
    size: int = 4 + 4

    def method(self, k: int = 2 * 3) -> None:
        pass


if __name__ == "__main__":
    f([1, 2], 3 if LIMIT > 1 else 4)
'''


def test_nothing_outside_function_bodies_or_in_excluded_code_is_mutated() -> None:
    sites = find_sites(EXCLUDED, "ex.py")
    if_line = EXCLUDED.splitlines().index("    if n >= 0:") + 1
    assert {s.lineno for s in sites} == {if_line, if_line + 2}
    assert sorted((s.kind, s.detail) for s in sites) == sorted(
        [
            (K.COMPARISON_OFF_BY_ONE, ">= -> >"),
            (K.WRONG_CONSTANT, "0 -> 1"),
            (K.INVERTED_CONDITION, "if c -> if not c"),
            (K.REMOVED_BRANCH, "if body -> pass"),
            (K.REMOVED_RETURN, "return expr -> return None"),
        ]
    )


def test_a_module_that_does_not_parse_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"cannot find mutation sites in 'bad.py'"):
        find_sites("def f(:\n", "bad.py")


# -- apply ----------------------------------------------------------------------------------


def _changed_lines(original: str, mutated: str) -> list[int]:
    """1-based lines of ``original`` that the mutation replaced or removed."""
    matcher = difflib.SequenceMatcher(a=original.splitlines(), b=mutated.splitlines())
    changed = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    return [i + 1 for _, i1, i2, _, _ in changed for i in range(i1, i2)]


@pytest.mark.parametrize("site", find_sites(SAMPLE, "shapes/core.py"), ids=lambda s: s.key)
def test_every_mutation_compiles_changes_the_ast_and_makes_one_hunk(site: Site) -> None:
    mutation = apply(SAMPLE, site)
    compile(mutation.mutated, site.path, "exec")
    assert mutation.original == SAMPLE and mutation.site == site
    assert ast.dump(ast.parse(mutation.mutated)) != ast.dump(ast.parse(SAMPLE))
    assert mutation.diff.count("\n@@ ") == 1 and mutation.diff.startswith("--- a/shapes/core.py")
    for comment in re.findall(r"#.*", SAMPLE):
        assert comment in mutation.mutated
    if site.kind in TOKEN_KINDS | {K.RANGE_OFF_BY_ONE, K.INVERTED_CONDITION}:
        assert _changed_lines(SAMPLE, mutation.mutated) == [site.lineno]
        assert len(mutation.mutated.splitlines()) == len(SAMPLE.splitlines())


def test_explanation_names_function_line_and_code() -> None:
    site = _site(SAMPLE, "classify", "< -> <=")
    explanation = apply(SAMPLE, site).explanation
    assert explanation.startswith(f"In classify (line {site.lineno}) the comparison `x < lo`")
    assert "`x <= lo`" in explanation
    final = apply(SAMPLE, _site(SAMPLE, "total", "return expr -> return None")).explanation
    assert "`return acc` became `return None`" in final


def test_applying_to_the_wrong_source_raises() -> None:
    site = _site(SAMPLE, "classify", "< -> <=")
    with pytest.raises(ValueError, match="does not match"):
        apply(OTHER, site)
    with pytest.raises(ValueError, match="does not match"):
        apply("\n" + SAMPLE, site)  # every line moved down by one
    with pytest.raises(ValueError, match="the nearest is"):
        apply(SAMPLE, replace(site, index=site.index + 50))


def test_non_ascii_text_and_crlf_line_endings_survive() -> None:
    source = 'def f(name):\r\n    label = "é→"; n = len(label) + 1  # ünïcode\r\n    return n\r\n'
    site = _site(source, "f", "+ -> -", "u.py")
    mutated = apply(source, site).mutated
    assert mutated == source.replace("len(label) + 1", "len(label) - 1")
    assert site.col == source.splitlines()[1].index("+")


# -- apply_many -----------------------------------------------------------------------------


def test_apply_many_rejects_overlapping_and_repeated_sites() -> None:
    compare = _site(SAMPLE, "classify", "< -> <=")
    invert = _site(SAMPLE, "classify", "if c -> if not c")
    with pytest.raises(ValueError, match="overlap"):
        apply_many(FILES, [compare, invert])
    with pytest.raises(ValueError, match="overlap"):
        apply_many(FILES, [compare, compare])
    with pytest.raises(ValueError, match=r"did you mean 'shapes/core\.py'"):
        apply_many(FILES, [replace(compare, path="shapes/cor.py")])


def test_apply_many_applies_disjoint_sites_in_any_order() -> None:
    sites = [
        _site(SAMPLE, "area", "* -> /"),
        _site(SAMPLE, "classify", "100 -> 99"),
        _site(OTHER, "first_even", "early return deleted", "shapes/util.py"),
    ]
    result = apply_many(FILES, sites)
    assert result == apply_many(FILES, sites[::-1])
    assert set(result) == set(FILES)
    assert "width / height" in result["shapes/core.py"] and "x >= 99" in result["shapes/core.py"]
    assert "return v" not in result["shapes/util.py"]
    for text in result.values():
        compile(text, "<mutated>", "exec")
    assert apply_many(FILES, []) == FILES


# -- sample_sites ---------------------------------------------------------------------------

_SAMPLE_SCRIPT = """
import json, sys
from agentgym_envs.repofix.mutate import sample_sites
files = json.loads(sys.stdin.read())
print(json.dumps([[s.key for s in sample_sites(files, 3, seed)] for seed in range(5)]))
"""


def test_sample_sites_is_deterministic_across_processes() -> None:
    here = [[s.key for s in sample_sites(FILES, 3, seed)] for seed in range(5)]
    assert here == [[s.key for s in sample_sites(FILES, 3, seed)] for seed in range(5)]
    root = Path(__file__).resolve().parents[2]
    for hash_seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", _SAMPLE_SCRIPT],
            input=json.dumps(FILES),
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
            env=env,
        )
        assert json.loads(out.stdout) == here


def test_sample_sites_draws_distinct_non_overlapping_sites_in_different_functions() -> None:
    draws = [sample_sites(FILES, 3, seed) for seed in range(20)]
    assert len({tuple(s.key for s in d) for d in draws}) > 10  # seeds differ
    for sites in draws:
        assert len(sites) == 3 and len({s.key for s in sites}) == 3
        assert len({(s.path, s.function) for s in sites}) == 3
        apply_many(FILES, sites)  # raises if two of them overlap


def test_sample_sites_respects_kinds_and_runs_out_gracefully() -> None:
    sites = sample_sites(FILES, 2, 7, kinds=[K.SWAPPED_ARGUMENTS, K.RANGE_OFF_BY_ONE])
    assert {s.kind for s in sites} <= {K.SWAPPED_ARGUMENTS, K.RANGE_OFF_BY_ONE}
    assert len(sample_sites(FILES, 10, 0, kinds=[K.SWAPPED_ARGUMENTS])) == 1
    assert sample_sites({"README.md": "# not python"}, 2, 0) == []
    with pytest.raises(ValueError, match="k must be >= 0"):
        sample_sites(FILES, -1, 0)


# -- describe_symptom -----------------------------------------------------------------------


@pytest.mark.parametrize("site", find_sites(SAMPLE, "shapes/core.py"), ids=lambda s: s.key)
def test_symptoms_name_the_function_but_not_the_fix(site: Site) -> None:
    vague, specific = describe_symptom(site, vague=True), describe_symptom(site, vague=False)
    assert vague != specific
    for text in (vague, specific):
        assert f"`{site.function}`" in text
        assert str(site.lineno) not in text and site.detail not in text and "->" not in text


# -- properties -----------------------------------------------------------------------------

_names = st.sampled_from(["a", "b", "n", "x"])
_atoms = _names | st.integers(0, 12).map(str)
_arith = st.recursive(
    _atoms,
    lambda inner: st.tuples(inner, st.sampled_from(["+", "-", "*", "//", "%"]), inner).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})"
    ),
    max_leaves=4,
)
_compare = st.tuples(_arith, st.sampled_from(["<", "<=", ">", ">=", "=="]), _arith).map(" ".join)
_cond = _compare | st.tuples(_compare, st.sampled_from(["and", "or"]), _compare).map(" ".join)


def _block(lines: list[str]) -> str:
    return "".join(f"    {line}\n" for line in lines)


_statements = st.one_of(
    st.tuples(_arith).map(lambda t: [f"x = {t[0]}  # set x"]),
    st.tuples(_cond, _arith).map(lambda t: [f"if {t[0]}:", f"    return {t[1]}"]),
    st.tuples(_cond, _arith, _cond).map(
        lambda t: [
            f"if {t[0]}:",
            f"    x = {t[1]}",
            f"elif {t[2]}:",
            "    x = 0",
            "else:",
            "    x += 1",
        ]
    ),
    st.tuples(_arith).map(lambda t: [f"for i in range({t[0]}):", "    x += i"]),
    st.tuples(_arith, _arith).map(lambda t: [f"for i in range({t[0]}, {t[1]}):", "    x -= i"]),
    st.tuples(_cond).map(lambda t: [f"while {t[0]}:", "    break"]),
    st.tuples(_arith, _cond, _arith).map(lambda t: [f"x = {t[0]} if {t[1]} else {t[2]}"]),
    st.tuples(_arith, _arith).map(lambda t: [f"x = helper({t[0]}, {t[1]})"]),
)
_functions = st.lists(_statements, min_size=1, max_size=4).map(
    lambda body: (
        "def helper(p, q):\n    return p - q\n\n\ndef f(a, b, n):\n    x = 0\n"
        + _block([line for stmt in body for line in stmt])
        + "    return x\n"
    )
)


def _unpatch(mutated: str, diff: str) -> str:
    """Apply a unified diff backwards: recover the original from the mutated text."""
    lines = mutated.splitlines(keepends=True)
    hunks = re.split(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@\n", diff, flags=re.M)[1:]
    for start, count, body in reversed(
        list(zip(hunks[::3], hunks[1::3], hunks[2::3], strict=True))
    ):
        size = 1 if count is None else int(count)
        old = [line[1:] for line in body.splitlines(keepends=True) if line[0] in " -"]
        at = int(start) - 1 if size else int(start)
        lines[at : at + size] = old
    return "".join(lines)


@given(_functions)
def test_every_generated_site_compiles_and_round_trips(source: str) -> None:
    compile(source, "gen.py", "exec")
    sites = find_sites(source, "gen.py")
    assert sites == find_sites(source, "gen.py")
    for site in sites:
        mutation = apply(source, site)
        compile(mutation.mutated, "gen.py", "exec")
        assert mutation.mutated != source
        assert _unpatch(mutation.mutated, mutation.diff) == source


# -- behaviour ------------------------------------------------------------------------------

CLAMP = '''\
def clamp(x, lo, hi):
    """Limit x to the closed range [lo, hi]."""
    if lo > hi:
        raise ValueError("empty range")
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
'''


def _clamp_test(clamp: Callable[..., Any]) -> bool:
    """A small hand-written test: True when every assertion holds."""
    try:
        assert clamp(5, 0, 10) == 5
        assert clamp(-3, 0, 10) == 0
        assert clamp(12, 0, 10) == 10
        assert clamp(0, 0, 10) == 0 and clamp(10, 0, 10) == 10
        assert clamp(4, 4, 4) == 4
        with pytest.raises(ValueError):
            clamp(1, 5, 0)
    except (AssertionError, pytest.fail.Exception, TypeError, ValueError):
        return False
    return True


def _load(source: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "clamp.py", "exec"), namespace)
    clamp: Callable[..., Any] = namespace["clamp"]
    return clamp


def test_most_mutations_of_clamp_break_its_test() -> None:
    assert _clamp_test(_load(CLAMP))
    sites = find_sites(CLAMP, "clamp.py")
    assert len(sites) >= 10
    survivors = [s for s in sites if _clamp_test(_load(apply(CLAMP, s).mutated))]
    # `x < lo` -> `x <= lo` (and `>` likewise) return the same value at the bound: equivalent.
    assert {s.detail for s in survivors} <= {"< -> <=", "> -> >="}
    assert len(survivors) <= len(sites) // 4


# -- the kinds real projects add ------------------------------------------------------------

ORDERED = """\
def norm(words, sep):
    out = []
    total = 0
    total += len(words)
    out.append(sep)
    label = "x"
    count = 1
    return max(total, 1), out, label.upper(), count


def shadow(values):
    return min(values)


def min(values):
    return values[0]
"""


def test_statements_trade_places_only_where_their_order_matters() -> None:
    sites = [s for s in find_sites(ORDERED, "o.py") if s.kind is K.SWAPPED_STATEMENTS]
    # total = 0 / total += ...: the second reads what the first wrote; out = [] and
    # total = 0 share nothing, nor do label and count: not offered
    assert [s.detail for s in sites] == ["lines 3 and 4 swapped"]
    mutated = apply(ORDERED, sites[0]).mutated.splitlines()
    assert mutated[2:4] == ["    total += len(words)", "    total = 0"]


def test_a_call_becomes_its_near_miss_unless_the_name_is_the_modules_own() -> None:
    sites = [s for s in find_sites(ORDERED, "o.py") if s.kind is K.CHANGED_CALL]
    assert [(s.function, s.detail) for s in sites] == [
        ("norm", "max -> min"),
        ("norm", "upper -> lower"),
    ]  # shadow's min() is this module's function: not a builtin to swap
    assert "label.lower()" in apply(ORDERED, sites[1]).mutated
    assert all(s.kind in CLASSIC_KINDS for seed in range(20)
               for s in sample_sites({"o.py": ORDERED}, 2, seed))  # fmt: skip
