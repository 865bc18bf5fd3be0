"""Seeded bug injection for RepoFix: find mutation sites in a module and apply them.

A site names one small, behaviour-changing edit (a flipped operator, an off-by-one bound, a
dropped branch, ...) inside a function body. Edits are made on the source text at the AST
node positions, so comments and formatting survive and the diff against the original (the
gold fix) touches only the mutated line(s). Everything here is a pure function of its
arguments: the same source, site and seed give the same result in every process.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from functools import lru_cache
from typing import Any

from agentgym_envs.core.errors import AgentGymError, ArgumentError


class MutationError(AgentGymError, ValueError):
    """A mutation site does not fit the source it is applied to (a missing file, a site
    of another version of the file, overlapping sites, an edit that breaks the syntax)."""


class MutationKind(StrEnum):
    """The families of injected bugs."""

    OPERATOR_FLIP = "operator_flip"  # + <-> -, * <-> /, // -> /, % -> //, and <-> or
    COMPARISON_OFF_BY_ONE = "comparison_off_by_one"  # < <-> <=, > <-> >=
    RANGE_OFF_BY_ONE = "range_off_by_one"  # range(a, b) -> range(a, b - 1) / range(a + 1, b)
    SWAPPED_ARGUMENTS = "swapped_arguments"  # f(a, b) -> f(b, a) for functions of this module
    REMOVED_BRANCH = "removed_branch"  # an `if` body becomes `pass`, or an `elif` arm goes
    REMOVED_RETURN = "removed_return"  # final `return x` -> `return None`; early return deleted
    WRONG_CONSTANT = "wrong_constant"  # int n -> n - 1 when n > 1, else n + 1
    INVERTED_CONDITION = "inverted_condition"  # if/while/ternary condition c -> not c
    # two adjacent one-line statements that share a name trade places
    SWAPPED_STATEMENTS = "swapped_statements"
    CHANGED_CALL = "changed_call"  # min <-> max, startswith <-> endswith, lower <-> upper...


# the kinds RepoFix's fixture tasks are drawn from (sample_sites' default): a new kind would
# change which sites every seed draws
CLASSIC_KINDS = tuple(MutationKind)[:8]


@dataclass(frozen=True)
class Site:
    """One place where one mutation can be applied.

    Attributes:
        kind: The family of the mutation.
        path: File path relative to the repository root, e.g. ``"intervals/core.py"``.
        function: Qualified name of the enclosing function, e.g. ``"Interval.overlaps"``.
        lineno: 1-based line of the mutated token or statement.
        col: 0-based character column of the mutated token or statement.
        index: Position among the sites of this kind in the file (a stable id).
        detail: The edit in short, e.g. ``"< -> <="``.
    """

    kind: MutationKind
    path: str
    function: str
    lineno: int
    col: int
    index: int
    detail: str

    @property
    def key(self) -> str:
        """``path:function:kind:index``, e.g. ``"a/core.py:Interval.overlaps:operator_flip:3"``."""
        return f"{self.path}:{self.function}:{self.kind.value}:{self.index}"

    def to_json(self) -> dict[str, Any]:
        """The site as task files store it (its fields, the kind's value and the key)."""
        return {**asdict(self), "kind": self.kind.value, "key": self.key}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Site:
        """The site :meth:`to_json` wrote (other keys ignored)."""
        values = {f.name: data[f.name] for f in fields(cls)}
        return cls(**{**values, "kind": MutationKind(values["kind"])})


@dataclass(frozen=True)
class Mutation:
    """One applied mutation: the file before and after, and how to talk about the change.

    Attributes:
        site: Where the mutation was applied.
        original: The whole file before (the gold fix).
        mutated: The whole file after.
        explanation: A sentence naming the function, line, code before and after, and effect.
        diff: Unified diff from ``original`` to ``mutated``.
    """

    site: Site
    original: str
    mutated: str
    explanation: str
    diff: str


Span = tuple[int, int, str]  # (start, end, replacement) as character offsets into the source
Node = ast.expr | ast.stmt


@dataclass(frozen=True)
class _Candidate:
    site: Site
    spans: tuple[Span, ...]
    explanation: str


_KIND_ORDER = {kind: i for i, kind in enumerate(MutationKind)}
_FLIP: dict[type, tuple[str, str]] = {ast.Add: ("+", "-"), ast.Sub: ("-", "+")}
_FLIP |= {
    ast.Mult: ("*", "/"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "/"),
    ast.Mod: ("%", "//"),
}
_FLIP |= {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">")}
_LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical"}
_SEQUENCES = (ast.JoinedStr, ast.List, ast.Tuple, ast.ListComp, ast.Set, ast.Dict)
_BELOW_NOT = (ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda)  # `not x` needs () around these
_BITWISE = (ast.BitOr, ast.BitAnd, ast.BitXor, ast.LShift, ast.RShift)
_EXPLAIN = {  # by detail, else by kind; {0} is the code before, {1} after
    "if body -> pass": "the body of `{0}` was replaced by `pass`, so that case is now ignored",
    "elif arm deleted": "the `{0}` arm was deleted, so its cases fall through to the next arm",
    "return expr -> return None": "`{0}` became `return None`, so callers get None, not a result",
    "early return deleted": "the early `{0}` was deleted, so execution carries on past it",
    "operator_flip": "the expression `{0}` became `{1}`, so it computes a different value",
    "comparison_off_by_one": "the comparison `{0}` became `{1}`, so a value exactly on the "
    "boundary lands on the wrong side",
    "range_off_by_one": "the range `{0}` became `{1}`, so the loop covers one value too few",
    "swapped_arguments": "the call `{0}` became `{1}`, so two arguments arrive swapped",
    "wrong_constant": "the line `{0}` became `{1}`, so a number used there is off by one",
    "inverted_condition": "the condition `{0}` became `{1}`, so the other branch runs",
    "swapped_statements": "the statements `{0}` now run in the order `{1}`, so one of them "
    "sees a value too early or too late",
    "changed_call": "the call `{0}` became `{1}`, so a related but different function runs",
}
# a function or method and the near miss it becomes (symmetric: a mutant's fix is a mutant)
_NEAR_MISS = dict(
    pair
    for a, b in [
        ("min", "max"), ("any", "all"), ("startswith", "endswith"), ("lower", "upper"),
        ("lstrip", "rstrip"), ("find", "rfind"), ("floor", "ceil"), ("isupper", "islower"),
        ("partition", "rpartition"), ("issubset", "issuperset"), ("ljust", "rjust"),
    ]
    for pair in ((a, b), (b, a))
)  # fmt: skip
_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)


class _Text:
    """Maps AST positions (1-based line, UTF-8 byte column) to offsets into the str."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.starts = [0, *(m.end() for m in re.finditer(r"\r\n|\r|\n", source))]

    def line_start(self, lineno: int) -> int:
        return self.starts[lineno - 1] if lineno <= len(self.starts) else len(self.source)

    def at(self, lineno: int, col: int) -> int:
        start = self.line_start(lineno)
        line = self.source[start : self.line_start(lineno + 1)]
        return start + (col if line.isascii() else len(line.encode()[:col].decode()))

    def span(self, node: Node) -> tuple[int, int]:
        assert node.end_lineno is not None and node.end_col_offset is not None
        return self.at(node.lineno, node.col_offset), self.at(node.end_lineno, node.end_col_offset)

    def seg(self, node: Node) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def where(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1]

    def token(self, left: Node, right: Node, token: str) -> tuple[int, int] | None:
        """Where ``token`` lies between two nodes (only brackets and comments can be there)."""
        start, end = self.span(left)[1], self.span(right)[0]
        gap = re.sub(r"#[^\r\n]*", lambda m: " " * len(m.group()), self.source[start:end])
        match = re.search(
            rf"\b{token}\b" if token.isalpha() else re.escape(token) + "(?![=/])", gap
        )
        return None if match is None else (start + match.start(), start + match.end())


def _excluded(node: ast.AST) -> bool:
    """Code that is not walked: it computes no result, or is not run by the function body."""
    if isinstance(node, ast.Call):  # print and logging only report
        func = node.func
        owner = ast.unparse(func.value).lower() if isinstance(func, ast.Attribute) else ""
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        logs = (name in _LOG_METHODS and "log" in owner) or (name == "warn" and "warn" in owner)
        return name == "print" or logs
    # Nested defs and classes are walked on their own, without their decorators, defaults
    # and annotations; 3.11 gives unreliable positions inside f-strings.
    skipped = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assert, ast.Raise)
    docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    main = isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)
    return isinstance(node, (*skipped, ast.JoinedStr)) or docstring or main


def _inert(stmt: ast.stmt) -> bool:
    """A statement whose removal changes nothing: pass, a docstring, print or logging."""
    report = isinstance(stmt, ast.Expr) and isinstance(stmt.value, (ast.Constant, ast.Call))
    return isinstance(stmt, ast.Pass) or (report and _excluded(stmt))


def _functions(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.FunctionDef]]:
    """Every function reachable through module, class and function bodies, by qualified name."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if not isinstance(node, ast.ClassDef):
                yield prefix + node.name, node  # type: ignore[misc]  # async def: same fields
            yield from _functions(node.body, f"{prefix}{node.name}.")
        elif not (isinstance(node, ast.If) and _excluded(node)):
            clauses = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.excepthandler)]
            for holder in [node, *clauses, *getattr(node, "cases", [])]:
                for name in ("body", "orelse", "finalbody"):
                    yield from _functions(getattr(holder, name, []), prefix)


def _arities(tree: ast.Module) -> dict[str, int]:
    """Positional arity of the module's functions by name, and of its methods by ``.name``."""
    arity: dict[str, int] = {}
    methods = {id(f) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args, bound = node.args, id(node) in methods
            count = 99 if args.vararg else len(args.posonlyargs) + len(args.args)
            if bound and not any("staticmethod" in ast.unparse(d) for d in node.decorator_list):
                count -= 1  # self or cls
            key = "." * bound + node.name
            arity[key] = max(arity.get(key, 0), count)
    return arity


class _Finder:
    """Collects the mutation candidates of one module, walking function bodies only."""

    def __init__(self, source: str, path: str) -> None:
        try:
            tree = ast.parse(source, filename=path)
        except SyntaxError as exc:
            raise MutationError(
                f"cannot find mutation sites in {path!r}: expected Python source, got a "
                f"syntax error ({exc}); pass a file that parses"
            ) from exc
        self.text, self.path, self.found = _Text(source), path, list[_Candidate]()
        self.arity, self.classes = _arities(tree), {"self", "cls"}
        self.classes |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for function, func in _functions(tree.body, ""):
            self.function, self.final = function, func.body[-1]
            for stmt in func.body:
                self._walk(stmt, func.body)

    def _walk(self, node: ast.AST, block: list[ast.stmt]) -> None:
        if _excluded(node):
            return
        self._visit(node, block)
        for name, value in ast.iter_fields(node):
            if name == "annotation" or (isinstance(node, ast.Lambda) and name == "args"):
                continue
            children = value if isinstance(value, list) else [value]
            inner = value if children and isinstance(children[0], ast.stmt) else block
            for child in children:
                if isinstance(child, ast.AST):
                    self._walk(child, inner)

    def _add(
        self,
        kind: MutationKind,
        spans: list[Span],
        detail: str,
        quote: Node | str | None,
        at: Node | None = None,
    ) -> None:
        """Record a candidate that quotes ``quote`` (a node, fixed text, or the whole line).

        The site lies at ``at`` (a statement), else where the first edit starts.
        """
        lineno, col = self.text.where(self.text.span(at)[0] if at else spans[0][0])
        site = Site(kind, self.path, self.function, lineno, col, -1, detail)
        before, after = (quote, "") if isinstance(quote, str) else ("", "")
        if not isinstance(quote, str):  # quote the code around the edit, before and after it
            last = self.text.where(max(s[1] for s in spans))[0]
            lines = self.text.line_start(lineno), self.text.line_start(last + 1)
            start, end = lines if quote is None else self.text.span(quote)
            before = self.text.source[start:end]
            after = _splice(before, [(s - start, e - start, t) for s, e, t in spans])
        words = (_EXPLAIN.get(detail) or _EXPLAIN[kind]).format(_snippet(before), _snippet(after))
        explanation = f"In {self.function} (line {lineno}) {words}."
        self.found.append(_Candidate(site, tuple(sorted(spans)), explanation))

    def _visit(self, node: ast.AST, block: list[ast.stmt]) -> None:
        text = self.text
        if isinstance(node, (ast.BinOp, ast.AugAssign)):
            self._operator(node)
        elif isinstance(node, ast.BoolOp):
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            pairs = zip(node.values, node.values[1:], strict=False)
            gaps = [text.token(a, b, old) for a, b in pairs]
            spans = [(*gap, new) for gap in gaps if gap]
            if len(spans) == len(gaps):
                self._add(MutationKind.OPERATOR_FLIP, spans, f"{old} -> {new}", node)
        elif isinstance(node, ast.Compare):
            lefts = [node.left, *node.comparators]
            for left, op, right in zip(lefts, node.ops, node.comparators, strict=False):
                old, new = _FLIP.get(type(op), ("", ""))
                gap = text.token(left, right, old) if old else None
                if gap:
                    kind = MutationKind.COMPARISON_OFF_BY_ONE
                    self._add(kind, [(*gap, new)], f"{old} -> {new}", node)
        elif isinstance(node, ast.Call):
            self._range(node)
            self._swap(node)
            self._near_miss(node)
        elif isinstance(node, ast.If):
            self._branch(node)
        elif isinstance(node, ast.Return):
            self._return(node, block)
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            value: int = node.value
            wrong = value - 1 if value > 1 else value + 1
            edit = (*text.span(node), str(wrong))
            self._add(MutationKind.WRONG_CONSTANT, [edit], f"{value} -> {wrong}", None)
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            self._invert(node)
        if isinstance(node, _SIMPLE):
            self._reorder(node, block)

    def _near_miss(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id not in self.arity:  # a builtin, not shadowed
            name, (start, end) = func.id, self.text.span(func)
        elif isinstance(func, ast.Attribute):
            name, end = func.attr, self.text.span(func)[1]
            start = end - len(name)
        else:
            return
        other = _NEAR_MISS.get(name)
        if other is None or self.text.source[start:end] != name:
            return
        self._add(MutationKind.CHANGED_CALL, [(start, end, other)], f"{name} -> {other}", node)

    def _reorder(self, node: ast.stmt, block: list[ast.stmt]) -> None:
        """``node`` and the statement after it trade places, when both are one-line simple
        statements on lines of their own and one writes a name the other reads or writes
        (so the order matters)."""
        at = next((i for i, s in enumerate(block) if s is node), -1)
        if at < 0 or at + 1 >= len(block) or not isinstance(block[at + 1], _SIMPLE):
            return
        first, second = node, block[at + 1]
        if isinstance(first, ast.Expr) and not isinstance(first.value, ast.Call):
            return  # a docstring or a bare name
        if isinstance(second, ast.Expr) and not isinstance(second.value, ast.Call):
            return
        if first.lineno != first.end_lineno or second.lineno != first.lineno + 1:
            return
        if second.end_lineno != second.lineno:
            return
        text = self.text
        start, middle = text.line_start(first.lineno), text.line_start(second.lineno)
        end = text.line_start(second.lineno + 1)
        one, two = text.source[start:middle], text.source[middle:end]
        lines_own = (
            text.seg(first).strip() == one.strip() and text.seg(second).strip() == two.strip()
        )
        if not lines_own or not two.endswith("\n") or one.strip() == two.strip():
            return
        writes_a, reads_a = _names(first)
        writes_b, reads_b = _names(second)
        if writes_a & (reads_b | writes_b) or writes_b & reads_a:
            detail = f"lines {first.lineno} and {second.lineno} swapped"
            self._add(MutationKind.SWAPPED_STATEMENTS, [(start, end, two + one)], detail, None)

    def _operator(self, node: ast.BinOp | ast.AugAssign) -> None:
        flip = _FLIP.get(type(node.op))
        sides = (
            (node.left, node.right) if isinstance(node, ast.BinOp) else (node.target, node.value)
        )
        # String formatting and concatenation, and sequence repetition, are not arithmetic.
        strings = [isinstance(getattr(n, "value", None), (str, bytes)) for n in sides]
        if flip is None or any(strings) or any(isinstance(n, _SEQUENCES) for n in sides):
            return
        old, new = flip if isinstance(node, ast.BinOp) else (flip[0] + "=", flip[1] + "=")
        gap = self.text.token(*sides, old)
        if gap:
            self._add(MutationKind.OPERATOR_FLIP, [(*gap, new)], f"{old} -> {new}", node)

    def _range(self, node: ast.Call) -> None:
        args = node.args
        calls_range = isinstance(node.func, ast.Name) and node.func.id == "range"
        if not calls_range or node.keywords or not 1 <= len(args) <= 3:
            return
        if any(isinstance(a, ast.Starred) for a in args):
            return
        shape = ["n"] if len(args) == 1 else ["a", "b", "s"][: len(args)]
        for position, suffix in [(0, " - 1")] if len(args) == 1 else [(1, " - 1"), (0, " + 1")]:
            arg = args[position]
            loose = isinstance(arg, (*_BELOW_NOT, ast.Compare)) or isinstance(
                getattr(arg, "op", None), (*_BITWISE, ast.Not)
            )  # `a | b - 1` would bind the wrong way
            code = f"({self.text.seg(arg)})" if loose else self.text.seg(arg)
            new = [s + suffix if i == position else s for i, s in enumerate(shape)]
            detail = f"range({', '.join(shape)}) -> range({', '.join(new)})"
            edit = (*self.text.span(arg), code + suffix)
            self._add(MutationKind.RANGE_OFF_BY_ONE, [edit], detail, node)

    def _swap(self, node: ast.Call) -> None:
        func, seg = node.func, self.text.seg
        if isinstance(func, ast.Name):
            name, arity = func.id, self.arity.get(func.id, 0)
        elif isinstance(func, ast.Attribute) and getattr(func.value, "id", "") in self.classes:
            name, arity = func.attr, self.arity.get("." + func.attr, 0)
        else:
            return
        for i in range(min(arity, len(node.args)) - 1):
            a, b = node.args[i], node.args[i + 1]
            if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
                return
            if seg(a).strip() != seg(b).strip() and ast.dump(a) != ast.dump(b):
                spans = [(*self.text.span(a), seg(b)), (*self.text.span(b), seg(a))]
                detail = f"{name}: arguments {i + 1} and {i + 2} swapped"
                self._add(MutationKind.SWAPPED_ARGUMENTS, spans, detail, node)

    def _is_elif(self, node: ast.stmt) -> bool:
        start = self.text.span(node)[0]
        return isinstance(node, ast.If) and self.text.source.startswith("elif", start)

    def _branch(self, node: ast.If) -> None:
        text, elif_ = self.text, self._is_elif(node)
        header = f"{'elif' if elif_ else 'if'} {_snippet(text.seg(node.test))}:"
        if not elif_:
            body = (text.span(node.body[0])[0], text.span(node.body[-1])[1], "pass")
            if not all(_inert(s) for s in node.body):
                self._add(MutationKind.REMOVED_BRANCH, [body], "if body -> pass", header, node)
            return
        last = node.body[-1].end_lineno or node.lineno
        end: int | None = text.line_start(last + 1)
        if node.orelse and self._is_elif(node.orelse[0]):
            end = text.line_start(node.orelse[0].lineno)
        elif node.orelse:  # the `else:` line has no node; look between the two bodies
            lines = range(last + 1, node.orelse[0].lineno + 1)
            pattern = re.compile(r"[ \t]*else[ \t]*:")
            heads = [n for n in lines if pattern.match(text.source, text.line_start(n))]
            end = text.line_start(heads[0]) if heads else None
        if end is not None:
            arm = (text.line_start(node.lineno), end, "")
            self._add(MutationKind.REMOVED_BRANCH, [arm], "elif arm deleted", header, node)

    def _return(self, node: ast.Return, block: list[ast.stmt]) -> None:
        text, (start, end), kind = self.text, self.text.span(node), MutationKind.REMOVED_RETURN
        quote = _snippet(text.seg(node))
        if node is self.final:
            if node.value is not None and getattr(node.value, "value", 0) is not None:
                self._add(kind, [(start, end, "return None")], "return expr -> return None", quote)
            return
        first, after = text.line_start(node.lineno), text.line_start((node.end_lineno or 0) + 1)
        own_lines = not text.source[first:start].strip() and re.fullmatch(
            r"[ \t]*(#[^\r\n]*)?(\r\n|\r|\n)?", text.source[end:after]
        )
        # A block cannot be empty, and a statement sharing its line must leave one there.
        edit = (first, after, "") if len(block) > 1 and own_lines else (start, end, "pass")
        self._add(kind, [edit], "early return deleted", quote, node)

    def _invert(self, node: ast.If | ast.While | ast.IfExp) -> None:
        test, (start, end) = node.test, self.text.span(node.test)
        if isinstance(test, ast.Constant) or "TYPE_CHECKING" in ast.unparse(test):
            return
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        if negated:
            new = self.text.source[start:end].removeprefix("not").lstrip()
        else:
            loose = isinstance(test, _BELOW_NOT)
            new = f"not ({self.text.seg(test)})" if loose else f"not {self.text.seg(test)}"
        was, now = ("not c", "c") if negated else ("c", "not c")
        if isinstance(node, ast.IfExp):
            detail = f"x if {was} else y -> x if {now} else y"
        else:
            word = "elif" if self._is_elif(node) else "if"
            word = "while" if isinstance(node, ast.While) else word
            detail = f"{word} {was} -> {word} {now}"
        quote = node if isinstance(node, ast.IfExp) else test
        self._add(MutationKind.INVERTED_CONDITION, [(start, end, new)], detail, quote)


def _names(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    """The names and attributes (``self.x``) a statement writes, and those it reads (a
    call's receiver counts as written too: ``items.append(x)`` changes ``items``)."""
    writes: set[str] = set()
    reads: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, (ast.Name, ast.Attribute)):
            name = ast.unparse(node)
            (writes if isinstance(node.ctx, ast.Store) else reads).add(name)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            writes.add(ast.unparse(node.func.value))
    if isinstance(stmt, ast.AugAssign):
        reads.add(ast.unparse(stmt.target))
    return writes, reads


def _snippet(code: str, limit: int = 90) -> str:
    flat = " ".join(code.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _splice(source: str, spans: Sequence[Span]) -> str:
    for start, end, text in sorted(spans, reverse=True):  # back to front keeps offsets valid
        source = source[:start] + text + source[end:]
    return source


def _overlaps(a: _Candidate, b: _Candidate) -> bool:
    same_file = a.site.path == b.site.path
    return same_file and any(s1 < e2 and s2 < e1 for s1, e1, _ in a.spans for s2, e2, _ in b.spans)


@lru_cache(maxsize=64)
def _candidates(source: str, path: str) -> tuple[_Candidate, ...]:
    def order(c: _Candidate) -> tuple[int, int, int]:
        return c.site.lineno, c.site.col, _KIND_ORDER[c.site.kind]

    found = sorted(_Finder(source, path).found, key=order)
    counts = dict.fromkeys(MutationKind, 0)
    numbered = []
    for c in found:
        numbered.append(replace(c, site=replace(c.site, index=counts[c.site.kind])))
        counts[c.site.kind] += 1
    return tuple(numbered)


def _lookup(files: Mapping[str, str], site: Site) -> _Candidate:
    if site.path not in files:
        close = difflib.get_close_matches(site.path, list(files), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise MutationError(
            f"site {site.key} is in {site.path!r}, which is not among the files{hint}; pass "
            "the files the site was found in"
        )
    candidates = _candidates(files[site.path], site.path)
    for candidate in candidates:
        if candidate.site == site:
            return candidate
    same = [c.site for c in candidates if c.site.kind == site.kind]
    near = min(same, key=lambda s: (abs(s.lineno - site.lineno), s.index), default=None)
    hint = f"; the nearest is {near.key} ({near.detail!r}, line {near.lineno})" if near else ""
    raise MutationError(
        f"site {site.key} ({site.detail!r} at line {site.lineno}, col {site.col}) does not match "
        f"this source of {site.path!r}, which has {len(same)} {site.kind.value} site(s){hint}; "
        "call find_sites() on the current source to get valid sites"
    )


def _mutate(source: str, chosen: Sequence[_Candidate]) -> str:
    mutated = _splice(source, [span for c in chosen for span in c.spans])
    try:
        compile(mutated, chosen[0].site.path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        keys = ", ".join(c.site.key for c in chosen)
        raise MutationError(
            f"mutating {keys} leaves invalid Python ({exc}); pick other sites"
        ) from exc
    return mutated


def find_sites(source: str, path: str) -> list[Site]:
    """Every mutation site in the function bodies of one module.

    Module-level code, docstrings, annotations, default values, decorators, ``if __name__``
    blocks, ``assert`` and ``raise`` statements, f-strings and print/logging calls are left
    alone, so every site changes what the code computes.

    Args:
        source: The module's source text.
        path: Its path relative to the repository root; it becomes ``Site.path``.

    Returns:
        The sites ordered by line, column and kind; the order does not depend on hashing.

    Raises:
        MutationError: The source does not parse (a ValueError).
    """
    return [c.site for c in _candidates(source, path)]


def apply(source: str, site: Site) -> Mutation:
    """Apply one mutation to one file, editing the text in place (comments survive).

    Args:
        source: The original source of ``site.path``.
        site: A site that :func:`find_sites` returned for this source.

    Returns:
        The mutation, with the whole file before and after, an explanation and a diff.

    Raises:
        MutationError: The site does not match this source (a different or changed file).
    """
    candidate = _lookup({site.path: source}, site)
    mutated = _mutate(source, [candidate])
    old, new = source.splitlines(keepends=True), mutated.splitlines(keepends=True)
    diff = difflib.unified_diff(old, new, fromfile=f"a/{site.path}", tofile=f"b/{site.path}")
    return Mutation(site, source, mutated, candidate.explanation, "".join(diff))


def apply_many(files: Mapping[str, str], sites: Sequence[Site]) -> dict[str, str]:
    """Apply several mutations, possibly across files, back to front within each file.

    Args:
        files: Source text by path; every site's ``path`` must be a key.
        sites: The sites to apply; those in one file must not overlap.

    Returns:
        All of ``files``, with the mutated ones replaced.

    Raises:
        MutationError: A site's file is missing, a site does not match its file, two sites
            overlap (or repeat), or together they leave a file invalid.
    """
    chosen: list[_Candidate] = []
    for candidate in (_lookup(files, site) for site in sites):
        for other in chosen:
            if _overlaps(candidate, other):
                raise MutationError(
                    f"sites {other.site.key} and {candidate.site.key} overlap (lines "
                    f"{other.site.lineno} and {candidate.site.lineno}); apply only one of them"
                )
        chosen.append(candidate)
    result = dict(files)
    for path in dict.fromkeys(c.site.path for c in chosen):
        result[path] = _mutate(files[path], [c for c in chosen if c.site.path == path])
    return result


def sample_sites(
    files: Mapping[str, str],
    k: int,
    seed: int,
    kinds: Sequence[MutationKind] | None = None,
    where: Callable[[Site], bool] | None = None,
) -> list[Site]:
    """Draw ``k`` distinct, non-overlapping sites from the ``.py`` files, seeded.

    Each draw picks a kind uniformly among those still available, then a site of that
    kind, preferring functions not hit yet, so common kinds (constants) do not crowd out
    rare ones. The result is the same in every process for the same arguments.

    Args:
        files: Source text by path; only paths ending in ``.py`` are used.
        k: How many sites to draw.
        seed: Seed of the ``random.Random`` that draws them.
        kinds: Allowed kinds; :data:`CLASSIC_KINDS` when None.
        where: Only sites it accepts are drawn (all when None).

    Returns:
        Up to ``k`` sites (fewer when the files hold fewer), ordered by path and position.

    Raises:
        ArgumentError: ``k`` is negative.
        MutationError: A file does not parse.
    """
    if k < 0:
        raise ArgumentError(f"k must be >= 0 (the number of sites to draw), got {k}")
    allowed = list(CLASSIC_KINDS) if kinds is None else [MutationKind(kind) for kind in kinds]
    paths = sorted(p for p in files if p.endswith(".py"))
    pool = [
        c
        for p in paths
        for c in _candidates(files[p], p)
        if c.site.kind in allowed and (where is None or where(c.site))
    ]
    rng, chosen = random.Random(seed), list[_Candidate]()
    while len(chosen) < k:
        free = [c for c in pool if not any(_overlaps(c, o) for o in chosen)]
        hit = {(o.site.path, o.site.function) for o in chosen}
        options = [c for c in free if (c.site.path, c.site.function) not in hit] or free
        if not options:
            break
        kind = rng.choice(sorted({c.site.kind for c in options}, key=_KIND_ORDER.__getitem__))
        pick = rng.choice([c for c in options if c.site.kind == kind])
        pool.remove(pick)
        same_file = [c for c in (*chosen, pick) if c.site.path == pick.site.path]
        try:  # disjoint edits almost always combine; when they do not, draw again
            _mutate(files[pick.site.path], same_file)
        except ValueError:
            continue
        chosen.append(pick)
    return sorted((c.site for c in chosen), key=lambda s: (s.path, s.lineno, s.col, s.kind))


_SYMPTOMS = {  # what a user would notice; it never says where the bug is or how to fix it
    "operator_flip": "seems to compute a wrong value, as if part of a formula were wrong",
    "comparison_off_by_one": "seems to return the wrong answer at a boundary (equal values)",
    "range_off_by_one": "seems to miss an item at the start or the end of a run of values",
    "swapped_arguments": "seems to mix up two values that it passes on to a helper",
    "removed_branch": "seems to ignore a special case that it should handle",
    "removed_return": "seems to return None or carry on where it should stop with a result",
    "wrong_constant": "seems to use a number that is off by one somewhere",
    "inverted_condition": "seems to do the opposite of what it should in some cases",
    "swapped_statements": "seems to use a value before it is ready, or to overwrite it",
    "changed_call": "seems to look at the wrong end or the wrong extreme of something",
}
_VAGUE = (
    "Some results from `{f}` look wrong for edge cases.",
    "`{f}` misbehaves on some inputs.",
    "Some values computed by `{f}` look wrong.",
)


def describe_symptom(site: Site, vague: bool) -> str:
    """A bug-report line for a site, for tasks that come without a traceback.

    Args:
        site: The mutated site.
        vague: Name only the function (True) or also how it misbehaves (False).

    Returns:
        One sentence; it never says where the bug is or how to fix it.
    """
    if vague:
        return _VAGUE[_KIND_ORDER[site.kind] % len(_VAGUE)].format(f=site.function)
    return f"`{site.function}` {_SYMPTOMS[site.kind]}."
