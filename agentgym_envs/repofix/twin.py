"""The twin of a repository's code: the same behaviour, written differently.

RepoFix pays ``reproduced_failure`` for a command that fails because of the injected
bugs, and checks it by rerunning the command privately. A command can also fail because
the files *read* differently from the fix: a hash of the package (``md5sum``), a grep for
the buggy line or for the fixed one. Such a command tells contents apart, not behaviour.
The check therefore also runs it on the twin of the base and on the twin of the fixed
base, where it must fail and pass as on the code itself; a command that reads the text
gets a different answer there.

The twin of a Python file is its syntax tree unparsed (comments, blank lines, quotes and
spacing normalised; docstrings kept), with every function's, lambda's and
comprehension's local variables renamed, and every function's parameters copied on entry
into renamed locals, so that nearly every line of a function body (where the mutator
injects its bugs) reads differently. Nothing a caller or a test can name changes:
parameters (they may be passed by keyword), globals, attributes, class attributes,
function and class names, docstrings and constants stay; tracebacks show other source
lines and line numbers.

Renaming follows the compiler's own scope analysis (:mod:`symtable`). A name is left
alone where renaming could change what runs: names that appear in an annotation or are
bound by a ``match`` pattern, names bound by ``import``, ``def`` or ``class``, ``global``
and ``nonlocal`` names. A module that reads frames or variables by name (``locals()``,
``vars()``, ``eval``, ``exec``, ``dir()``, ``sys._getframe``, ``f_locals``, ...) is
only reformatted.

What a twin does not hide (the residual, documented in the README's security section):
a command that parses the code and looks at its structure (which operator or constant
sits in a function, ``co_consts`` of a code object), that counts operators
(``grep -c '<='``) or that greps a text with no local variable or parameter in it (an
attribute and an operator: ``.start <= ``, a module constant, ``return None``) still
tells the buggy code from the fixed one.
"""

from __future__ import annotations

import ast
import builtins
import logging
import symtable
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from agentgym_envs.core.pyast import AST_LOCK

logger = logging.getLogger(__name__)

# Names and attributes that read variables by name: a module that uses one is only
# reformatted (a renamed variable would change what they see).
FRAME_NAMES = frozenset({"locals", "vars", "eval", "exec", "dir", "globals"})
FRAME_ATTRIBUTES = frozenset(
    {"_getframe", "currentframe", "f_locals", "f_back", "stack", "getouterframes",
     "getinnerframes", "trace", "co_varnames", "co_cellvars", "co_freevars", "tb_frame"}
)  # fmt: skip
PREFIX = "_v"  # renamed variables are _v0, _v1, ... (skipping names the module uses)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# the symbol table's name of each comprehension's scope
SCOPE_NAMES = {ast.ListComp: "listcomp", ast.SetComp: "setcomp", ast.DictComp: "dictcomp",
               ast.GeneratorExp: "genexpr"}  # fmt: skip
Comprehension = ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp
Scoped = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | Comprehension


class _Mismatch(Exception):
    """The syntax tree and the symbol table disagree (a construct this module does not
    follow, e.g. the scopes of type parameters): the file is then only reformatted."""


def twin_files(files: Mapping[str, str]) -> dict[str, str]:
    """The twin of each Python file of ``files`` (relative path -> text); the other files
    are left out."""
    return {path: twin_source(text) for path, text in files.items() if path.endswith(".py")}


@lru_cache(maxsize=256)
def twin_source(source: str) -> str:
    """The twin of a Python source: unparsed, its local variables renamed and its
    parameters copied into renamed locals. A source that does not parse, or whose
    unparsed text would not parse back to the same tree, comes back unchanged (with a
    warning: the fixture and mutated files always parse)."""
    with AST_LOCK:
        try:
            tree = ast.parse(source)
            table = symtable.symtable(source, "<twin>", "exec")
        except (SyntaxError, ValueError) as exc:
            logger.warning("no twin for a source that does not parse (%s)", exc)
            return source
        try:
            _Renamer(tree).module(table)
            ast.fix_missing_locations(tree)  # the parameters' copies: unparse reads lines
        except _Mismatch as exc:
            logger.warning("twin: variables not renamed (%s); the file is only reformatted", exc)
            tree = ast.parse(source)
        text = ast.unparse(tree) + "\n"
        if ast.dump(ast.parse(text)) != ast.dump(tree):
            logger.warning("twin: the unparsed text does not parse back; the file is kept")
            return source
    return text


@dataclass
class _Scope:
    """A symbol table as the renamer walks it: its renames, and its child scopes by
    (name, line), consumed in the compiler's order."""

    table: symtable.SymbolTable
    names: dict[str, str]
    children: dict[tuple[str, int], deque[symtable.SymbolTable]]

    @classmethod
    def of(cls, table: symtable.SymbolTable, names: dict[str, str]) -> _Scope:
        children: dict[tuple[str, int], deque[symtable.SymbolTable]] = defaultdict(deque)
        for child in table.get_children():
            if str(child.get_type()) in ("function", "class"):  # not annotation scopes
                children[(child.get_name(), child.get_lineno())].append(child)
        return cls(table, names, children)

    def child(self, name: str, lineno: int) -> symtable.SymbolTable:
        queue = self.children.get((name, lineno))
        if not queue:
            raise _Mismatch(f"no scope {name!r} at line {lineno} in {self.table.get_name()!r}")
        return queue.popleft()


class _Renamer:
    """Renames, in place, the local variables of a module's syntax tree."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.used = _identifiers(tree) | set(dir(builtins))
        self.kept = _kept(tree)
        self.count = 0

    def fresh(self) -> str:
        while f"{PREFIX}{self.count}" in self.used:
            self.count += 1
        name = f"{PREFIX}{self.count}"
        self.used.add(name)
        return name

    def module(self, table: symtable.SymbolTable) -> None:
        if _reads_frames(self.tree):
            return  # only reformatted
        self.visit_all(self.tree.body, _Scope.of(table, {}))

    def visit_all(self, nodes: Iterable[ast.AST | None], scope: _Scope) -> None:
        for node in nodes:
            if node is not None:
                self.visit(node, scope)

    def visit(self, node: ast.AST, scope: _Scope) -> None:
        """Rename ``node``'s names in ``scope``; the parts of a nested scope evaluated
        where it is defined (defaults, decorators, bases, a comprehension's first
        iterable) belong to ``scope``, the rest to the nested scope. Annotations are
        never renamed (their names are kept everywhere)."""
        if isinstance(node, (*FUNCTIONS, ast.Lambda)):
            args = node.args
            self.visit_all([*args.defaults, *args.kw_defaults], scope)
            if isinstance(node, ast.Lambda):
                self.function(node, scope.child("lambda", node.lineno), scope)
            else:
                self.visit_all(node.decorator_list, scope)
                self.function(node, scope.child(node.name, node.lineno), scope)
        elif isinstance(node, ast.ClassDef):
            self.visit_all([*node.bases, *node.keywords, *node.decorator_list], scope)
            table = scope.child(node.name, node.lineno)
            self.visit_all(node.body, _Scope.of(table, _inherited(table, scope.names)))
        elif isinstance(node, COMPREHENSIONS):
            self.visit(node.generators[0].iter, scope)
            key = (SCOPE_NAMES[type(node)], node.lineno)
            if scope.children.get(key) or isinstance(node, ast.GeneratorExp):
                self.function(node, scope.child(*key), scope)
            else:  # inlined in its scope (Python 3.12+, PEP 709): no scope of its own
                self.comprehension(node, scope)
        elif isinstance(node, ast.Name):
            node.id = scope.names.get(node.id, node.id)
        elif isinstance(node, ast.Nonlocal):
            node.names = [scope.names.get(n, n) for n in node.names]
        elif isinstance(node, ast.ExceptHandler):
            if node.name is not None:
                node.name = scope.names.get(node.name, node.name)
            self.visit_all([node.type, *node.body], scope)
        elif isinstance(node, ast.AnnAssign):
            self.visit_all([node.target, node.value], scope)
        elif not isinstance(node, ast.arg):
            self.visit_all(ast.iter_child_nodes(node), scope)

    def function(self, node: Scoped, table: symtable.SymbolTable, outer: _Scope) -> None:
        """A function, lambda or comprehension: its locals renamed, and a function's
        parameters copied on entry into renamed locals."""
        _check(node, table)
        names = _inherited(table, outer.names)
        params: list[tuple[str, str]] = []
        if isinstance(node, FUNCTIONS):  # copied in signature order
            for arg in _arguments(node.args):
                if arg.arg not in self.kept:
                    params.append((arg.arg, self.fresh()))
            names.update(params)
        for symbol in sorted(table.get_symbols(), key=lambda s: s.get_name()):
            name = symbol.get_name()
            if name not in self.kept and name not in names and _renamable(symbol):
                names[name] = self.fresh()
        scope = _Scope.of(table, names)
        if isinstance(node, FUNCTIONS):
            self.visit_all(node.body, scope)
            if params:
                start = 1 if ast.get_docstring(node, clean=False) is not None else 0
                node.body.insert(start, _copy(params))
        elif isinstance(node, ast.Lambda):
            self.visit(node.body, scope)
        else:
            self.comprehension(node, scope)

    def comprehension(self, node: Comprehension, scope: _Scope) -> None:
        """A comprehension but its first iterable (evaluated outside), in the compiler's
        order."""
        first, *rest = node.generators
        self.visit_all([first.target, *first.ifs], scope)
        for generator in rest:
            self.visit_all([generator.target, generator.iter, *generator.ifs], scope)
        if isinstance(node, ast.DictComp):
            self.visit_all([node.value, node.key], scope)
        else:
            self.visit(node.elt, scope)


def _check(node: Scoped, table: symtable.SymbolTable) -> None:
    """That ``table`` is ``node``'s scope: the same parameters, the names it binds.

    Raises:
        _Mismatch: it is not (two scopes of one name on one line, visited out of the
            compiler's order).
    """
    if isinstance(node, (*FUNCTIONS, ast.Lambda)):
        params = {a.arg for a in _arguments(node.args)}
        if not isinstance(table, symtable.Function) or params != set(table.get_parameters()):
            raise _Mismatch(f"the parameters of {table.get_name()!r} at line {node.lineno}")
    else:
        targets = {
            n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)
        }
        if not targets <= set(table.get_identifiers()):
            raise _Mismatch(f"the targets of {table.get_name()!r} at line {node.lineno}")


def _renamable(symbol: symtable.Symbol) -> bool:
    """A variable of its own scope, bound by assignment (not a parameter, an import, a
    ``def`` or ``class``, a ``global`` or a free variable)."""
    bound_elsewhere = symbol.is_imported() or symbol.is_namespace() or symbol.is_global()
    own = symbol.is_local() and symbol.is_assigned() and not symbol.is_parameter()
    return own and not bound_elsewhere and not symbol.get_name().startswith(".")


def _inherited(table: symtable.SymbolTable, names: Mapping[str, str]) -> dict[str, str]:
    """The renames of the enclosing scopes that hold in ``table``: those of its free and
    ``nonlocal`` names, and of names it never mentions (a nested scope may)."""
    out = {}
    for name, new in names.items():
        try:
            symbol = table.lookup(name)
        except KeyError:
            out[name] = new
            continue
        if symbol.is_free() or symbol.is_nonlocal():
            out[name] = new
    return out


def _arguments(args: ast.arguments) -> list[ast.arg]:
    extra = [a for a in (args.vararg, args.kwarg) if a is not None]
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *extra]


def _copy(params: list[tuple[str, str]]) -> ast.Assign:
    """``new = param`` (or ``a, b = x, y``): the statement that copies the parameters."""
    targets: list[ast.expr] = [ast.Name(id=new, ctx=ast.Store()) for _, new in params]
    values: list[ast.expr] = [ast.Name(id=old, ctx=ast.Load()) for old, _ in params]
    if len(params) == 1:
        return ast.Assign(targets=targets, value=values[0])
    target = ast.Tuple(elts=targets, ctx=ast.Store())
    return ast.Assign(targets=[target], value=ast.Tuple(elts=values, ctx=ast.Load()))


def _identifiers(tree: ast.AST) -> set[str]:
    """Every identifier the module spells (a new name must not clash with any)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        for field in ("id", "arg", "name", "attr", "asname", "rest"):
            value = getattr(node, field, None)
            if isinstance(value, str):
                found.update(value.split("."))
        for field in ("names", "kwd_attrs"):
            value = getattr(node, field, None)
            if isinstance(value, list):
                found.update(v for v in value if isinstance(v, str))
    return found


def _kept(tree: ast.AST) -> set[str]:
    """Names never renamed: those in annotations (evaluated, or stored as text, where
    they are written) and those a ``match`` pattern binds."""
    annotations: list[ast.AST] = []
    kept: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            annotations.append(node.annotation)
        elif isinstance(node, FUNCTIONS) and node.returns is not None:
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name is not None:
            kept.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest is not None:
            kept.add(node.rest)
    for annotation in annotations:
        kept.update(n.id for n in ast.walk(annotation) if isinstance(n, ast.Name))
    return kept


def _reads_frames(tree: ast.AST) -> bool:
    """Whether the module reads variables by name (``locals()``, ``sys._getframe``, ...)."""
    return any(
        (isinstance(node, ast.Name) and node.id in FRAME_NAMES)
        or (isinstance(node, ast.Attribute) and node.attr in FRAME_ATTRIBUTES)
        for node in ast.walk(tree)
    )


__all__ = ["twin_files", "twin_source"]
