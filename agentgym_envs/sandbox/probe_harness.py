"""Observed calls, the data RepoFix grades by. This file is copied into the sandbox runtime
as ``agentgym_probe`` and uses the standard library only (pytest in record mode).

Record (build time, on the task's *correct* code only; a pytest plugin loaded with
``-p agentgym_probe``, ``AGENTGYM_PROBE_PACKAGE`` = the package, or several joined by
commas, and ``AGENTGYM_PROBE_TESTS`` = the test folders or files relative to the rootdir,
joined by ``os.pathsep`` (default ``tests``); the calls go to ``calls.json`` in
``AGENTGYM_RESULTS_DIR``): every function, method, property and constructor the package
defines (outside its test modules) is wrapped; a call made directly from a test file is
written down, before it runs, as plain data: its target, its receiver's state and its
arguments (at most ``AGENTGYM_PROBE_MAX_CALLS`` per test where that is set: a test
may loop over 10,000 inputs). Calls whose inputs are not plain data
are left out. Every wrapped function a test reaches, directly or not, is noted too
(``covered``: the test ids by function), which selects the tests a bug can affect.

Replay (grading; ``python -m agentgym_probe --path . PACKAGE`` with the calls on stdin
and ``AGENTGYM_RESULTS`` = the output file): each call is made on the code in the working
folder, one after another, and what it observed is written as plain data: the value
returned (iterators read out) or the type of the exception raised, what it printed, and
the state of its receiver and arguments afterwards. Nothing here knows what the correct
code returns: the grader compares outside the sandbox.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import decimal
import enum
import fractions
import importlib
import io
import json
import math
import os
import pkgutil
import re
import sys
import threading
import types
from typing import Any

MAX_DEPTH = 40
MAX_ITEMS = 20000  # encoded nodes per value; an iterator is read out this far at most
# never wrapped: object protocol and machinery whose wrapping changes what Python does
_SKIP = frozenset({
    "__new__", "__init_subclass__", "__class_getitem__", "__getattribute__", "__getattr__",
    "__setattr__", "__delattr__", "__del__", "__post_init__", "__hash__", "__reduce__",
    "__reduce_ex__", "__getstate__", "__setstate__", "__copy__", "__deepcopy__", "__dir__",
    "__sizeof__", "__subclasshook__", "__instancecheck__", "__subclasscheck__",
    "__set_name__", "__get__", "__set__", "__delete__", "__enter__", "__exit__", "__iter__",
    "__next__", "__await__", "__aiter__", "__anext__", "__repr__", "__format__",
    "__bool__", "__index__", "__length_hint__", "__missing__",
})  # fmt: skip


class Unencodable(Exception):
    """A value that is not plain data (a callable, an open file, a cycle, ...)."""


def path_of(obj: Any) -> str:
    """``module:qualname`` of a class or function."""
    return f"{obj.__module__}:{obj.__qualname__}"


def resolve(path: str) -> Any:
    """The object ``module:qualname`` names (imports the module)."""
    module, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def in_packages(name: str, packages: tuple[str, ...]) -> bool:
    """Whether the module ``name`` is one of ``packages`` or inside one."""
    return any(name == p or name.startswith(p + ".") for p in packages)


class _Encoder:
    def __init__(self, package: str, read_iterators: bool) -> None:
        self.packages = tuple(package.split(","))
        self.read_iterators = read_iterators
        self.count = 0

    def ours(self, cls: type) -> bool:
        return in_packages(getattr(cls, "__module__", "") or "", self.packages)

    def __call__(self, value: Any, depth: int = 0) -> Any:
        self.count += 1
        if depth > MAX_DEPTH or self.count > MAX_ITEMS:
            raise Unencodable("too deep or too large")
        down = depth + 1
        kind = type(value)
        if value is None or kind in (bool, int, str):
            return value
        if kind is float:
            return value if math.isfinite(value) else {"$float": repr(value)}
        if kind is list:
            return [self(v, down) for v in value]
        if kind is tuple:
            return {"$tuple": [self(v, down) for v in value]}
        if kind in (dict, collections.Counter, collections.OrderedDict):
            tag = {dict: "$dict", collections.Counter: "$counter"}.get(kind, "$ordereddict")
            return {tag: [[self(k, down), self(v, down)] for k, v in dict.items(value)]}
        if kind is collections.defaultdict and value.default_factory in _FACTORIES:
            pairs = [[self(k, down), self(v, down)] for k, v in dict.items(value)]
            return {"$defaultdict": pairs, "factory": value.default_factory.__name__}
        if kind is collections.deque:
            return {"$deque": [self(v, down) for v in value]}
        if kind in (set, frozenset):
            items = [self(v, down) for v in value]
            return {"$" + kind.__name__: sorted(items, key=_canonical)}
        if kind in (bytes, bytearray):
            return {"$" + kind.__name__: value.hex()}
        if kind is complex:
            return {"$complex": [repr(value.real), repr(value.imag)]}
        if kind is range:
            return {"$range": [value.start, value.stop, value.step]}
        if kind in (datetime.datetime, datetime.date, datetime.time):
            return {"$" + kind.__name__: value.isoformat()}
        if kind is datetime.timedelta:
            return {"$timedelta": [value.days, value.seconds, value.microseconds]}
        if kind is decimal.Decimal:
            return {"$decimal": str(value)}
        if kind is fractions.Fraction:
            return {"$fraction": [value.numerator, value.denominator]}
        if kind is io.StringIO:
            return {"$stringio": [value.getvalue(), value.tell()]}
        if kind is io.TextIOWrapper:  # a text file the test opened: its contents, as a string
            return {"$stringio": [self.text_file(value), 0]}
        if issubclass(kind, enum.Enum):
            return {"$enum": path_of(kind), "name": object.__getattribute__(value, "_name_")}
        if issubclass(kind, type) and (self.ours(value) or value.__module__ == "builtins"):
            return {"$type": path_of(value)}
        if self.ours(kind):
            return self.instance(value, down)
        if self.read_iterators and (kind is types.GeneratorType or kind in _ITERATORS):
            items = []
            for item in value:
                items.append(self(item, down))
                if len(items) > MAX_ITEMS:
                    raise Unencodable("an endless iterator")
            return {"$iter": items}
        raise Unencodable(f"a {kind.__module__}.{kind.__qualname__}")

    @staticmethod
    def text_file(stream: io.TextIOWrapper) -> str:
        """A file at its start: what it holds if it is read, empty if only written (then
        it was just created or truncated; anything else is not plain data)."""
        if stream.closed or stream.tell() != 0:
            raise Unencodable("an open file away from its start")
        if not stream.readable():
            return ""
        text = stream.read()
        stream.seek(0)
        return text

    def instance(self, value: Any, down: int) -> Any:
        """An object of one of the package's classes: its attributes, read directly
        (no code of the package runs)."""
        state: dict[str, Any] = {}
        with contextlib.suppress(AttributeError):
            state.update(object.__getattribute__(value, "__dict__"))
        for cls in type(value).__mro__:
            for slot in cls.__dict__.get("__slots__", ()):
                if slot not in ("__dict__", "__weakref__") and slot not in state:
                    try:
                        state[slot] = object.__getattribute__(value, slot)
                    except AttributeError:
                        continue
        out: dict[str, Any] = {"$obj": path_of(type(value))}
        out["state"] = [[k, self(v, down)] for k, v in sorted(state.items())]
        if issubclass(type(value), tuple):
            out["items"] = [self(v, down) for v in tuple.__iter__(value)]
        elif issubclass(type(value), list):
            out["items"] = [self(v, down) for v in list.__iter__(value)]
        elif issubclass(type(value), dict):  # what it holds, read as a plain dict
            out["pairs"] = [[self(k, down), self(v, down)] for k, v in dict.items(value)]
        elif issubclass(type(value), set | frozenset):
            out["items"] = sorted((self(v, down) for v in set(value)), key=_canonical)
        if issubclass(type(value), BaseException):
            args: Any = BaseException.__dict__["args"].__get__(value)  # not an override
            out["args"] = [self(v, down) for v in args]
        return out


_FACTORIES = (int, float, str, list, dict, set, tuple)
_SAMPLES: list[Any] = [
    iter([]), iter(()), iter({}), iter(set()), iter(""), iter(range(0)), map(len, []),
    filter(None, []), zip(), reversed([]), enumerate([]), iter({}.values()), iter({}.items()),
]  # fmt: skip
_ITERATORS: tuple[type, ...] = tuple(type(x) for x in _SAMPLES)


def _canonical(encoded: Any) -> str:
    return json.dumps(encoded, sort_keys=True)


def encode(value: Any, package: str, *, read_iterators: bool = False) -> Any:
    """``value`` as JSON-safe data; raises :class:`Unencodable` where it is not plain data."""
    return _Encoder(package, read_iterators)(value)


def decode(data: Any) -> Any:
    """The value :func:`encode` described (package objects rebuilt without their
    ``__init__``)."""
    if data is None or isinstance(data, bool | int | str | float):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    tag = next(k for k in data if k.startswith("$"))
    payload = data[tag]
    if tag == "$obj":
        return _rebuild(resolve(payload), data)
    if tag == "$enum":
        return getattr(resolve(payload), data["name"])
    if tag == "$defaultdict":
        factory = {f.__name__: f for f in _FACTORIES}[data["factory"]]
        return collections.defaultdict(factory, {decode(k): decode(v) for k, v in payload})
    simple = _DECODERS.get(tag)
    if simple is None:
        raise ValueError(f"unknown tag {tag!r}")
    return simple(payload)


def _rebuild(cls: Any, data: dict[str, Any]) -> Any:
    obj: Any
    if issubclass(cls, tuple):
        obj = tuple.__new__(cls, [decode(v) for v in data.get("items", ())])
    elif issubclass(cls, frozenset):
        obj = frozenset.__new__(cls, [decode(v) for v in data.get("items", ())])
    elif issubclass(cls, list | dict | set):
        base = next(b for b in (list, dict, set) if issubclass(cls, b))
        obj = base.__new__(cls)
    elif issubclass(cls, BaseException):
        obj = BaseException.__new__(cls)
        obj.args = tuple(decode(v) for v in data.get("args", ()))
    else:
        obj = object.__new__(cls)
    if isinstance(obj, list):
        list.extend(obj, [decode(v) for v in data.get("items", ())])
    elif isinstance(obj, dict):
        for key, value in data.get("pairs", ()):
            dict.__setitem__(obj, decode(key), decode(value))
    elif isinstance(obj, set):
        set.update(obj, [decode(v) for v in data.get("items", ())])
    for key, value in data["state"]:
        object.__setattr__(obj, key, decode(value))
    return obj


_DECODERS: dict[str, Any] = {
    "$float": float,
    "$tuple": lambda v: tuple(decode(x) for x in v),
    "$dict": lambda v: {decode(k): decode(x) for k, x in v},
    "$counter": lambda v: collections.Counter({decode(k): decode(x) for k, x in v}),
    "$ordereddict": lambda v: collections.OrderedDict((decode(k), decode(x)) for k, x in v),
    "$deque": lambda v: collections.deque(decode(x) for x in v),
    "$set": lambda v: {decode(x) for x in v},
    "$frozenset": lambda v: frozenset(decode(x) for x in v),
    "$bytes": bytes.fromhex,
    "$bytearray": lambda v: bytearray.fromhex(v),
    "$complex": lambda v: complex(float(v[0]), float(v[1])),
    "$range": lambda v: range(*v),
    "$datetime": datetime.datetime.fromisoformat,
    "$date": datetime.date.fromisoformat,
    "$time": datetime.time.fromisoformat,
    "$timedelta": lambda v: datetime.timedelta(days=v[0], seconds=v[1], microseconds=v[2]),
    "$decimal": decimal.Decimal,
    "$fraction": lambda v: fractions.Fraction(v[0], v[1]),
    "$stringio": lambda v: _stringio(*v),
    "$type": resolve,
}


def _stringio(text: str, position: int) -> io.StringIO:
    stream = io.StringIO(text)
    stream.seek(position)
    return stream


# -- record ---------------------------------------------------------------------------------


class Recorder:
    """Wraps the package's callables and writes down the calls tests make (module
    docstring). Only ever used on correct code, at build time."""

    def __init__(
        self, package: str, root: str, tests: tuple[str, ...] = ("tests",), per_test: int = 0
    ) -> None:
        self.package = package
        self.max_per_test = per_test  # 0: no cap
        self.packages = tuple(package.split(","))
        self.root = os.path.realpath(root)
        self.tests = tuple(os.path.realpath(os.path.join(root, t)) for t in tests)
        self.calls: list[dict[str, Any]] = []
        self.left_out = 0
        self.test = ""
        self.per_test: dict[str, int] = {}
        self.covered: dict[str, set[str]] = {}
        self._local = threading.local()
        self._wrapped: dict[int, Any] = {}
        self._files: dict[str, bool] = {}

    def install(self) -> None:
        """Import the package and every module in it but its tests; wrap what they
        define."""
        for package in self.packages:
            root = importlib.import_module(package)
            for info in pkgutil.walk_packages(getattr(root, "__path__", []), package + "."):
                if info.name.endswith("__main__") or self._is_test(info.name):
                    continue
                try:
                    importlib.import_module(info.name)
                except Exception:  # an optional module whose dependency is missing
                    continue
        modules = [
            m
            for n, m in sorted(sys.modules.items())
            if self._in_package(n) and not self._from_tests(getattr(m, "__file__", None) or "")
        ]
        for module in modules:
            for value in list(vars(module).values()):
                if isinstance(value, type) and self._in_package(value.__module__):
                    self._wrap_class(value)
                elif isinstance(value, types.FunctionType) and self._defined_here(value):
                    self._wrapped.setdefault(id(value), self._wrapper(value, "function"))
        for module in modules:  # every module's name for a function now names its wrapper
            for name, value in list(vars(module).items()):
                if isinstance(value, types.FunctionType) and id(value) in self._wrapped:
                    setattr(module, name, self._wrapped[id(value)])

    def _in_package(self, name: str) -> bool:
        return in_packages(name, self.packages)

    def _is_test(self, module: str) -> bool:
        """A module of the package that is one of its tests (never imported here)."""
        parts = module.split(".")
        return any(p in ("tests", "test", "testing") or p.startswith("test_") for p in parts)

    def _defined_here(self, fn: Any) -> bool:
        return self._in_package(fn.__module__ or "") and "<locals>" not in fn.__qualname__

    def _wrap_class(self, cls: type) -> None:
        if id(cls) in self._wrapped or issubclass(cls, enum.Enum):
            return
        self._wrapped[id(cls)] = cls
        for name, member in list(vars(cls).items()):
            if name in _SKIP:
                continue
            if isinstance(member, property) and hasattr(member.fget, "__qualname__"):
                getter = self._wrapper(member.fget, "property", name)
                wrapped: Any = property(getter, member.fset, member.fdel, member.__doc__)
            elif isinstance(member, staticmethod):
                wrapped = staticmethod(self._wrapper(member.__func__, "function"))
            elif isinstance(member, classmethod):
                wrapped = classmethod(self._wrapper(member.__func__, "classmethod", name))
            elif isinstance(member, types.FunctionType):
                kind = "new" if name == "__init__" else "method"
                wrapped = self._wrapper(member, kind, name)
            else:
                continue
            try:
                setattr(cls, name, wrapped)
            except (TypeError, AttributeError):  # a property named __name__ (toolz's
                continue  # ``excepts``): the type keeps its own; that member goes unrecorded
        # (a property whose getter is not a function, ``property(attrgetter(...))``, too)

    def _wrapper(self, fn: Any, kind: str, name: str = "") -> Any:
        recorder = self

        target = path_of(fn)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if recorder.test:
                recorder.covered.setdefault(target, set()).add(recorder.test)
            caller = sys._getframe(1).f_code.co_filename
            if not getattr(recorder._local, "busy", False) and recorder._from_tests(caller):
                recorder._note(fn, kind, name, args, kwargs, caller)
            return fn(*args, **kwargs)

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        for attr in ("__name__", "__qualname__", "__module__", "__doc__"):
            setattr(wrapper, attr, getattr(fn, attr))
        return wrapper

    def _from_tests(self, filename: str) -> bool:
        found = self._files.get(filename)
        if found is None:  # realpath costs a system call per part: once per file
            real = os.path.realpath(filename) if filename else ""
            found = any(real == t or real.startswith(t + os.sep) for t in self.tests)
            self._files[filename] = found
        return found

    def _note(self, fn: Any, kind: str, name: str, args: Any, kwargs: Any, caller: str) -> None:
        # during collection, the test file stands for the test
        where = self.test or os.path.relpath(os.path.realpath(caller), self.root)
        made = self.per_test.get(where, 0)
        if self.max_per_test and made >= self.max_per_test:
            return
        self.per_test[where] = made + 1
        self._local.busy = True
        try:
            call: dict[str, Any] = {"test": where, "kind": kind}
            if kind == "function":
                call["target"] = path_of(fn)
            elif kind == "classmethod":
                call["target"], call["name"], args = path_of(args[0]), name, args[1:]
            elif kind == "new":
                call["target"], args = path_of(type(args[0])), args[1:]
            else:  # a method or property: the receiver's state, the name looked up on it
                call["self"], call["name"], args = encode(args[0], self.package), name, args[1:]
            call["args"] = [encode(a, self.package) for a in args]
            call["kwargs"] = [[k, encode(v, self.package)] for k, v in sorted(kwargs.items())]
        except Unencodable:
            self.left_out += 1
            return
        finally:
            self._local.busy = False
        try:  # an int past Python's 4,300 digits: json.dump of the calls would raise midway
            json.dumps(call)
        except ValueError:
            self.left_out += 1
        else:
            self.calls.append(call)


_RECORDER: Recorder | None = None


def pytest_configure(config: Any) -> None:
    global _RECORDER
    if os.environ.get("AGENTGYM_PROBE_PACKAGE") and _RECORDER is None:
        package = os.environ["AGENTGYM_PROBE_PACKAGE"]
        tests = os.environ.get("AGENTGYM_PROBE_TESTS") or "tests"
        cap = int(os.environ.get("AGENTGYM_PROBE_MAX_CALLS") or 0)
        _RECORDER = Recorder(package, str(config.rootpath), tuple(tests.split(os.pathsep)), cap)
        _RECORDER.install()


def pytest_runtest_setup(item: Any) -> None:
    if _RECORDER is not None:
        _RECORDER.test = item.nodeid


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    if _RECORDER is not None:
        covered = {k: sorted(v) for k, v in sorted(_RECORDER.covered.items())}
        data = {"calls": _RECORDER.calls, "left_out": _RECORDER.left_out, "covered": covered}
        path = os.path.join(os.environ["AGENTGYM_RESULTS_DIR"], "calls.json")
        text = json.dumps(data)  # whole before written: a value it cannot write leaves no file
        with open(path + ".tmp", "w") as fh:
            fh.write(text)
        os.replace(path + ".tmp", path)


# -- replay ---------------------------------------------------------------------------------


def observe(call: dict[str, Any], package: str) -> dict[str, Any]:
    """Make one recorded call on the code imported now; what it observed."""
    try:
        args = [decode(a) for a in call["args"]]
        kwargs = {k: decode(v) for k, v in call["kwargs"]}
        receiver = decode(call["self"]) if "self" in call else None
        kind = call["kind"]
        if kind == "property":
            target: Any = None
        elif kind in ("method", "classmethod"):
            owner = receiver if kind == "method" else resolve(call["target"])
            target = getattr(owner, call["name"])
        else:  # a function or a constructor
            target = resolve(call["target"])
    except Exception as exc:  # the code no longer has what the call needs
        return {"broken": f"{type(exc).__name__}"}
    out: dict[str, Any] = {}
    printed = io.StringIO()
    stdout, sys.stdout = sys.stdout, printed
    try:
        value = getattr(receiver, call["name"]) if target is None else target(*args, **kwargs)
        out["value"] = encode(value, package, read_iterators=True)
    except Unencodable as exc:
        out["value"] = {"$unencodable": str(exc)}
    except BaseException as exc:  # whatever the code raised is what it observed
        out["raised"] = path_of(type(exc))
        out["message"] = _message(exc)
    finally:
        sys.stdout = stdout
    try:
        after = [encode(a, package) for a in args] + [encode(v, package) for v in kwargs.values()]
        if receiver is not None:
            after.append(encode(receiver, package))
        out["after"] = after
    except Exception:  # not plain data, or reading it raised (a file the call closed...)
        out["after"] = None
    if printed.getvalue():
        out["printed"] = printed.getvalue()
    return out


def _message(exc: BaseException) -> str:
    """The exception's text, without object addresses (they differ from run to run)."""
    try:
        text = str(exc)
    except BaseException:  # its __str__ raised: that is its text
        return "<unprintable>"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


def replay(package: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every call's observation, in order."""
    return [observe(call, package) for call in calls]


def main(argv: list[str]) -> int:
    output = os.environ["AGENTGYM_RESULTS"]
    paths = []
    while argv and argv[0] == "--path":
        paths.append(os.path.abspath(argv[1]))
        argv = argv[2:]
    sys.path[:0] = paths
    (package,) = argv
    calls = json.loads(sys.stdin.read())
    try:
        for name in package.split(","):
            importlib.import_module(name)
        observed: Any = replay(package, calls)
    except BaseException as exc:  # the package does not import
        observed = {"import_failed": path_of(type(exc))}
    with open(output + ".tmp", "w") as fh:
        json.dump({"observed": observed}, fh)
    os.replace(output + ".tmp", output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
