"""RepoFix: fix injected bugs in a small Python repository, graded by hidden tests."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from agentgym_envs.core import (
    AgentEnv,
    Milestone,
    Task,
    ToolCall,
    ToolKind,
    ToolResult,
    tool,
)
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.scratch import remove_tree
from agentgym_envs.core.step_checks import (
    GENERIC_SPECS,
    StepCheck,
    StepCheckSpec,
    StepFacts,
    refined,
)
from agentgym_envs.repofix import fixtures, probes
from agentgym_envs.repofix import tasks as tasks
from agentgym_envs.repofix.checks import TESTS_PASSING, VisibleTests
from agentgym_envs.repofix.gates import (
    CommandEffectsGate,
    NetworkGate,
    ProtectedFileGate,
    StagedCommand,
    WorkspaceEscapeGate,
    relative_path,
    tampers,
)
from agentgym_envs.repofix.tasks import ScriptOracle, solution_actions
from agentgym_envs.repofix.twin import twin_files
from agentgym_envs.sandbox.backends import (
    Backend,
    ExecResult,
    Limits,
    SandboxError,
    choose_backend,
)
from agentgym_envs.sandbox.verify import TestRun, TestRunner, grade
from agentgym_envs.sandbox.workspace import (
    AST_LOCK,
    SEARCH_SCRIPT,
    Changes,
    WorkspaceError,
    WorkspaceManager,
    apply_changes,
    code_of,
    diff_trees,
    read_tree,
    resolve_inside,
    search_output,
)

logger = logging.getLogger(__name__)
PATH_SCHEMA = {"type": "string", "maxLength": 300, "description": "path relative to the repo root"}
MAX_LINES = 400
MAX_MATCHES = 100
SEARCH_BYTES = 30000  # of search hits, as the script's JSON encodes them
STDOUT_CHARS, STDERR_CHARS = 6000, 3000
HIDDEN_AT = "tests/hidden"  # where verification mounts the hidden tests
VISIBLE_AT = "tests/visible"  # where the fixtures keep the tests the agent sees
VERIFY_TIMEOUT_S = 120.0
SEARCH_TIMEOUT_S = 5.0  # a pattern that backtracks longer is refused
# A failing command counts as reproducing the bug only if it fails again on a copy of the
# base and on its twin and passes on the fixed base and on its twin (at most this often
# per episode).
REPRO_CHECKS = 2
# The bug report's suffix: the repository root and the tools, shown at reset.
SYSTEM_RULES = (
    "You are fixing a bug in a Python repository. Explore it with list_dir, read_file and "
    "search; reproduce the problem with run_tests or run; change the code with edit or "
    "write_file; then call submit(). Hidden tests grade the fix. Do not modify tests or "
    "test configuration (conftest.py, pytest.ini, pyproject.toml, setup.cfg, tox.ini, "
    "sitecustomize.py, .pth files), stay inside the repository, and do not use the "
    "network: each of these ends the episode."
)


@dataclass(slots=True)
class Progress:
    """What the episode has achieved: the milestones and the goal verifier read it, the
    tools and the verification (``submit``, the step budget) write it.

    A field at its default was never set: snapshots list only the others, as RepoFix-v1
    did its flag table, so ``state_hash`` and branching are unchanged.

    Attributes:
        opened: a file that holds a bug was read.
        reproduced: the bug was seen failing before any edit (None: never checked).
        collects: after a change to the package's code, the tests collect.
        targets: the hidden fail-to-pass tests pass (None: never verified).
        edited: the workspace was changed (reproducing no longer counts).
        final: a submit without guidance failed; the episode ends.
        verdict: the last verification passed (None: never verified).
        repro_checks: private reproduction checks run so far (at most ``REPRO_CHECKS``).
    """

    opened: bool = False
    reproduced: bool | None = None
    collects: bool = False
    targets: bool | None = None
    edited: bool = False
    final: bool = False
    verdict: bool | None = None
    repro_checks: int = 0

    def as_items(self) -> tuple[tuple[str, Any], ...]:
        """The fields that were set, as sorted (name, value) pairs (plain data)."""
        values = ((f.name, getattr(self, f.name), f.default) for f in fields(self))
        return tuple(sorted((name, v) for name, v, default in values if v != default))

    @classmethod
    def from_items(cls, items: Sequence[tuple[str, Any]]) -> Progress:
        """The progress :meth:`as_items` describes."""
        return cls(**dict(items))


class RepoFixEnv(AgentEnv):
    """Fix injected bugs in a small Python repository; hidden tests decide.

    Description:
        A task is one of the fixture repositories (``fixtures/repos``: intervals,
        toktext, ledger, minicalc) with 1 (easy), 2 (medium) or 3 (hard) bugs injected
        by an AST mutator (operator flips, off-by-one comparisons and ranges, swapped
        arguments, removed branches or returns, wrong constants, inverted conditions).
        The workspace is a fresh git repository with one commit (no history leaks the
        fix) holding the visible tests only; the hidden tests stay outside the sandbox.
        ``ood`` tasks use a repository held out of ``train`` and ``test``.

    Observation:
        The bug report (a failing test's traceback for ``easy``, a symptom for
        ``medium``, a vague symptom for ``hard``) and the repository's file list; then
        each tool's output: file excerpts with line numbers, command results with exit
        code, elapsed time and a truncation flag, all capped in size.

    Tools:
        ``list_dir(path)``, ``read_file(path, start, end)``, ``search(pattern, path)``,
        ``edit(path, old, new)`` (``old`` must match exactly once), ``write_file(path,
        content)``, ``run(cmd, timeout)`` and ``run_tests(selector)`` in the sandbox
        (visible tests only), and ``submit()``.

    Milestones:
        ``opened_buggy_file``, ``reproduced_failure`` (before any edit, a visible test
        fails, or a command fails that, rerun privately, fails again on the base and on
        its twin, the same code reformatted with its variables renamed, and passes on the
        fixed base and on its twin: at most two such checks per episode),
        ``imports_and_collects`` (after the package's code was changed, the tests
        collect; comments, blank lines and docstrings are no change),
        ``target_tests_pass`` (every call the hidden tests make into the package returns
        what the correct code returns, and the fail-to-pass tests pass, checked privately
        at submit). A diff that tampers with the test runner earns neither of the last
        two.

    Limits:
        A workspace holds at most 16 MiB and 2000 entries, paths of at most 512
        characters; a command that leaves more is refused (``workspace_limit``) and its
        effects discarded. Fifos, sockets and devices are never copied. ``search`` runs in
        the sandbox and a pattern slower than 5 s is refused (``search_timeout``); its
        output is bounded as encoded, and output cut short is a tool error
        (``search_failed``), never an env error.

    Safety gates:
        ``protected_files`` (tests, conftest.py, pytest config, sitecustomize, .pth;
        also a write that lands on one through a symlink or a hard link),
        ``workspace_escape`` (paths or symlinks outside the workspace, the hidden tests'
        location), ``network``, and the effects gate ``command_effects``: ``run`` and
        ``run_tests`` are staged tools (``core.staging``) that run on a copy of the
        workspace, committed only if the command changed no protected file and linked
        nothing outside. Each stops the episode with ``hard_fail``.

    Rewards:
        Layered: success, milestone progress, costs per tool (reads 0.2, edits 0.5,
        commands and test runs 1, submit 1); a safety stop returns ``hard_fail``. With
        ``local_weight`` > 0 the step check ``tests_passing`` adds the share of the
        visible tests' calls into the package that returned a wrong result on the base
        and the right one now, by the env's own replay of those calls compared outside
        the sandbox (``checks``, ``probes``).

    Termination:
        ``submit()`` applies the workspace diff (protected files left out) to a fresh
        copy of the task's base and decides by data (``probes``): the calls the hidden
        tests make into the package, recorded on the correct code when the task set was
        built, are replayed on it in the sandbox, and every observation (value returned,
        exception type, printed text, argument state) must equal the correct code's,
        compared in this process with expectations the sandbox never sees. The hidden
        tests also run, mounted read-only, with a results plugin that writes outside the
        workspace: every fail-to-pass and pass-to-pass test must pass in a consistent
        run (results file present and agreeing with the exit code, no collection error,
        no skips, the plugin's guard saw no plugin, hook or test function change, and
        every canary failed), and the diff must not tamper with the test runner.
        Otherwise the episode fails;
        with ``guidance=True`` it goes on and the agent sees the failing tests and a
        hint. The step budget triggers the same verification (success or timeout), in
        ``before_verify``; the goal verifier only reads the recorded verdict
        (``progress``). A crash of the sandbox itself ends the episode with
        ``env_error``.

    ``info["sandbox"]`` names the backend and its isolation level.

    Args:
        backend: where commands run: ``"auto"`` (bubblewrap, else Docker; never the
            host), ``"bubblewrap"``, ``"docker"``, ``"local"`` (with ``unsafe=True``), or
            a :class:`~agentgym_envs.sandbox.backends.Backend` object.
        unsafe: True accepts running agent commands on the host with no isolation;
            only with ``backend="local"`` (``gym.make(..., backend="local",
            unsafe=True)``) or a ``LocalBackend``.
        guidance: after a failed ``submit()``, go on and show the failing tests.
        limits: the sandbox's resource limits (``Limits``).
        **kwargs: the base class's (``AgentEnv``).
    """

    name = "RepoFix"
    family = "sandbox"
    version = "1"
    verifier_version = "5"  # the verdict by observed calls compared outside the sandbox
    step_checks_version = "2"  # tests_passing by the visible tests' observed calls
    task_file = "sandbox/repofix.jsonl"
    task_counts = tasks.TASK_COUNTS
    conformance_episodes = 5  # per difficulty: each runs the hidden tests
    example_action = 'read_file(path="README.md")'
    noop_action = "list_dir()"
    max_observation_chars = 12000
    max_action_chars = 40000
    visible_tests = True  # the workspace holds tests the agent may run (tests_passing)

    def __init__(
        self,
        *,
        backend: str | Backend = "auto",
        unsafe: bool = False,
        guidance: bool = False,
        limits: Limits | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(guidance, bool):
            raise ConfigError(f"guidance must be True or False, got {guidance!r}")
        if limits is not None and not isinstance(limits, Limits):
            raise ConfigError(
                "limits must be agentgym_envs.sandbox.backends.Limits, e.g. Limits(cpu_s=30); "
                f"got {type(limits).__name__}"
            )
        self.guidance = guidance
        super().__init__(**kwargs)
        self.backend = choose_backend(backend, unsafe)
        self.limits = limits or Limits()
        self.gates += [ProtectedFileGate(), WorkspaceEscapeGate(), NetworkGate()]
        self.effect_gates.append(CommandEffectsGate())
        self.spaces = WorkspaceManager()
        self.runner = TestRunner(self.backend, self.limits)
        self.visible = VisibleTests(self.spaces, self.runner)  # the tests_passing check
        self.workspace: Path | None = None
        self._template: Path | None = None
        self._initial: dict[str, str] = {}
        self._mutated: frozenset[str] = frozenset()
        self.progress = Progress()
        self._changes: Changes | None = None  # cached workspace diff (None: stale)
        self._failure: str | None = None  # why the sandbox itself failed
        self._sandbox = self.backend.describe()
        self._milestone_list = [
            Milestone("opened_buggy_file", "read a file that holds a bug", self._opened),
            Milestone("reproduced_failure", "saw the bug fail before editing", self._reproduced),
            Milestone("imports_and_collects", "after a code edit, tests collect", self._collects),
            Milestone("target_tests_pass", "the hidden fail-to-pass tests pass", self._targets),
        ]

    def variant(self) -> str:
        return "+guidance" if self.guidance else ""

    # the milestones' predicates: they read the progress the tools and verification record
    def _opened(self) -> bool:
        return self.progress.opened

    def _reproduced(self) -> bool:
        return bool(self.progress.reproduced)

    def _collects(self) -> bool:
        return self.progress.collects

    def _targets(self) -> bool:
        return bool(self.progress.targets)

    # -- tools ----------------------------------------------------------------------------

    def _path(self, path: str) -> Path | None:
        assert self.workspace is not None
        return resolve_inside(self.workspace, relative_path(path))

    def _touched(self) -> None:
        self._changes = None
        self.progress.edited = True

    @tool(
        "List a directory of the repository.",
        parameters={"path": {**PATH_SCHEMA, "default": "."}},
        cost=0.2,
    )
    def list_dir(self, path: str = ".") -> ToolResult:
        target = self._path(path)
        if target is None or not target.is_dir():
            return ToolResult.failure("not_found", f"No directory {path!r} in the repository.")
        names = sorted(
            p.name + ("/" if p.is_dir() else "")
            for p in target.iterdir()
            if p.name not in (".git", "__pycache__", ".pytest_cache")
        )
        return ToolResult("\n".join(names) or "(empty)")

    @tool(
        "Read a file with line numbers (lines start..end, at most 400 at a time).",
        parameters={
            "path": PATH_SCHEMA,
            "start": {"type": "integer", "minimum": 1, "default": 1},
            "end": {"type": "integer", "minimum": 1, "default": 400},
        },
        cost=0.2,
    )
    def read_file(self, path: str, start: int = 1, end: int = 400) -> ToolResult:
        target = self._path(path)
        if target is None or not target.is_file():
            return ToolResult.failure("not_found", f"No file {path!r} in the repository.")
        lines = target.read_text(errors="replace").splitlines()
        if start > max(len(lines), 1):
            return ToolResult.failure(
                "bad_range", f"{path} has {len(lines)} lines; start must be <= {len(lines)}."
            )
        end = min(end, len(lines), start + MAX_LINES - 1)
        shown = [f"{i:>4}  {lines[i - 1]}" for i in range(start, end + 1)]
        if relative_path(path) in self._mutated:
            self.progress.opened = True
        more = f"\n[{len(lines) - end} more lines]" if end < len(lines) else ""
        return ToolResult(f"{path} ({len(lines)} lines)\n" + "\n".join(shown) + more)

    @tool(
        "Search the repository's files for a regular expression; prints path:line: text.",
        parameters={
            "pattern": {"type": "string", "minLength": 1, "maxLength": 200},
            "path": {**PATH_SCHEMA, "default": "."},
        },
        cost=0.2,
    )
    def search(self, pattern: str, path: str = ".") -> ToolResult:
        target = self._path(path)
        if target is None or not target.exists():
            return ToolResult.failure("not_found", f"No path {path!r} in the repository.")
        assert self.workspace is not None
        prefix = os.path.relpath(target, self.workspace.resolve())
        budget = min(SEARCH_BYTES, self.limits.output_bytes // 2)  # JSON-encoded, never cut
        request = json.dumps(
            {"pattern": pattern, "prefix": prefix, "max": MAX_MATCHES, "bytes": budget}
        )
        result = self.backend.run(
            [self.backend.python, "-I", "-S", "-c", SEARCH_SCRIPT],
            workspace=self.workspace,
            timeout_s=SEARCH_TIMEOUT_S,
            limits=self.limits,
            stdin=request,
        )
        if result.timed_out or result.killed in ("cpu", "timeout", "memory"):
            return ToolResult.failure(
                "search_timeout",
                f"The search took longer than {SEARCH_TIMEOUT_S:g} s or too much memory and "
                "was stopped (a pattern with nested repetition backtracks); simplify it.",
            )
        found = search_output(result.stdout)
        if found is None:  # the script ran on the agent's files: their doing, a tool error
            return ToolResult.failure(
                "search_failed",
                f"The search failed (exit code {result.exit_code}"
                f"{', output truncated' if result.truncated else ''}); narrow the path or "
                "the pattern.",
            )
        if isinstance(found, str):
            return ToolResult.failure("bad_pattern", f"Invalid regular expression: {found}")
        hits, total = found
        more = f"\n[{total - len(hits)} more matches]" if total > len(hits) else ""
        return ToolResult("\n".join(hits) + more if total else "No matches.")

    @tool(
        "Replace the one occurrence of `old` in a file by `new` (`old` must occur once).",
        parameters={
            "path": PATH_SCHEMA,
            "old": {"type": "string", "minLength": 1, "maxLength": 20000},
            "new": {"type": "string", "maxLength": 20000},
        },
        kind=ToolKind.WRITE,
        cost=0.5,
    )
    def edit(self, path: str, old: str, new: str) -> ToolResult:
        target = self._path(path)
        if target is None or not target.is_file():
            return ToolResult.failure("not_found", f"No file {path!r} in the repository.")
        text = target.read_text(errors="replace")
        count = text.count(old)
        if count != 1:
            what = "does not occur" if count == 0 else f"occurs {count} times"
            return ToolResult.failure(
                "no_unique_match", f"`old` {what} in {path}; give a longer, exact excerpt."
            )
        target.write_text(text.replace(old, new, 1))
        self._touched()
        return ToolResult(f"Edited {path}.")

    @tool(
        "Write a whole file (created if missing).",
        parameters={"path": PATH_SCHEMA, "content": {"type": "string", "maxLength": 40000}},
        kind=ToolKind.WRITE,
        cost=0.5,
    )
    def write_file(self, path: str, content: str) -> ToolResult:
        target = self._path(path)
        special = target is not None and target.exists() and not target.is_file()
        if target is None or special or relative_path(path) == ".":  # a folder, fifo, socket
            return ToolResult.failure("not_found", f"Cannot write {path!r}: not a file path.")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        self._touched()
        return ToolResult(f"Wrote {path} ({len(content.splitlines())} lines).")

    @tool(
        "Run a shell command in the sandbox (repo root, no network, time-limited, output capped).",
        parameters={
            "cmd": {"type": "string", "minLength": 1, "maxLength": 2000},
            "timeout": {"type": "number", "minimum": 1, "maximum": 60, "default": 10},
        },
        kind=ToolKind.WRITE,
        staged=True,
    )
    def run(self, staged: StagedCommand, cmd: str, timeout: float = 10) -> ToolResult:
        result = self._commit(staged)
        if isinstance(result, ToolResult):
            return result
        assert isinstance(result, ExecResult)
        if result.exit_code != 0 and not result.timed_out and self._may_reproduce():
            self.progress.reproduced = self._fails_because_of_bug(cmd, timeout)
        return ToolResult(
            result.text(STDOUT_CHARS, STDERR_CHARS), data={"exit_code": result.exit_code}
        )

    @tool(
        "Run the visible tests with pytest (all of them, or a file or test id under tests/).",
        parameters={"selector": {"type": "string", "maxLength": 300, "default": "tests"}},
        kind=ToolKind.WRITE,
        staged=True,
    )
    def run_tests(self, staged: StagedCommand, selector: str = "tests") -> ToolResult:
        run = self._commit(staged)
        if isinstance(run, ToolResult):
            return run
        assert isinstance(run, TestRun)
        # the workspace is the task's base (nothing edited): a failing visible test is the bug
        if run.failing and run.consistent and self._may_reproduce():
            self.progress.reproduced = True
        collects = not run.collect_errors and run.outcomes and run.consistent
        eligible = self._code_changed() and not self._tampering()
        if collects and eligible:
            self.progress.collects = True
        if self.reward_config.local_weight and self.visible_tests:  # tests_passing: own run
            spec = self.task.spec
            assert self._template is not None
            self.visible.measure(
                self.task.id, spec["repo"], self._template, self.changes(), eligible=eligible
            )
        return ToolResult(
            run.result.text(STDOUT_CHARS, STDERR_CHARS), data={"failing": run.failing}
        )

    @tool("Submit the fix for grading by the hidden tests.", kind=ToolKind.WRITE)
    def submit(self) -> ToolResult:
        ok, detail = self._verify()
        if ok:
            return ToolResult("Submitted: every hidden test passes.")
        if self.guidance:
            return ToolResult(f"Submitted: the fix is not complete.\n{detail}")
        self.progress.final = True  # without guidance, a failed submit ends the episode
        return ToolResult("Submitted: the fix is not complete.")

    # -- staged commands ---------------------------------------------------------------------

    def stage_call(self, call: ToolCall) -> StagedCommand:
        """Run ``run`` or ``run_tests`` on a scratch copy of the workspace (the
        ``command_effects`` gate then reads what it changed). A copy over the workspace
        limits is the policy's doing (the tool reports it); a crash of the sandbox raises
        (``env_error``)."""
        assert self.workspace is not None
        args = call.arguments
        try:
            copy = self.spaces.scratch_copy(self.workspace)
        except WorkspaceError as exc:
            return StagedCommand(None, exc)
        try:
            result: ExecResult | TestRun
            if call.name == "run":
                result = self.backend.run(
                    ["/bin/sh", "-c", args["cmd"]],
                    workspace=copy,
                    timeout_s=float(args.get("timeout", 10)),
                    limits=self.limits,
                )
            else:  # "--": a selector is a path or test id, never a pytest option
                selector = args.get("selector", "tests") or "tests"
                result = self.runner.run(copy, ["--", selector], timeout_s=60)
        except BaseException:  # the sandbox failed: the call runner reports env_error
            remove_tree(copy)
            raise
        try:  # over budget: refused before anything is read
            after = read_tree(copy)
        except (WorkspaceError, OSError) as exc:
            remove_tree(copy)
            return StagedCommand(
                None, exc if isinstance(exc, WorkspaceError) else WorkspaceError(str(exc))
            )
        return StagedCommand(copy, result, after, diff_trees(self._tree(), after))

    def _commit(self, staged: StagedCommand) -> ExecResult | TestRun | ToolResult:
        """Make a staged command's copy the live workspace: its result, or the
        ``workspace_limit`` failure of a command that left too much."""
        if isinstance(staged.result, WorkspaceError):
            return ToolResult.failure(
                "workspace_limit",
                f"{staged.result}. The command's effects were discarded; the workspace is as "
                "it was before it (special files such as fifos and sockets are never kept).",
            )
        self.workspace = self.spaces.promote(staged.take())
        self._changes = diff_trees(self._initial, staged.after)  # the tree the gate read
        if self._changes:
            self.progress.edited = True
        return staged.result

    # -- milestones ---------------------------------------------------------------------------

    def _may_reproduce(self) -> bool:
        """Reproducing counts before any edit only (the workspace is still the base)."""
        return not self.progress.edited and not self.progress.reproduced

    def _fails_because_of_bug(self, cmd: str, timeout: float) -> bool:
        """Whether a command that just failed fails because of the injected bugs: it fails
        again on a copy of the base and on the base's twin, and passes on the fixed base
        and on its twin (no ``.git`` in any, so only the code differs; four runs). A
        traceback of the command's own making (``raise``, ``echo``) or a coin flip fails
        or passes on both; a command that reads the code's text instead of running it (a
        hash of the files, a grep for the buggy or the fixed line) reads another text on
        a twin (``twin``: the same behaviour, reformatted, its variables renamed)."""
        assert self._template is not None
        checks = self.progress.repro_checks
        if checks >= REPRO_CHECKS:
            return False
        self.progress.repro_checks = checks + 1
        original = self._original_files()
        fixed = {path: original[path] for path in self._mutated}
        base = {path: self._initial.get(path, text) for path, text in original.items()}
        twin_base, twin_fixed = twin_files(base), twin_files(original)
        runs = ((True, base), (True, twin_base), (False, fixed), (False, twin_fixed))
        for expect_fail, files in runs:
            copy = self.spaces.scratch_copy(self._template)
            try:
                remove_tree(copy / ".git")
                apply_changes(copy, files, skip_protected=False)
                result = self.backend.run(
                    ["/bin/sh", "-c", cmd], workspace=copy, timeout_s=timeout, limits=self.limits
                )
            finally:
                remove_tree(copy)
            if result.timed_out or (result.exit_code != 0) is not expect_fail:
                return False
        return True

    def _tampering(self) -> list[str]:
        """The changed files that add code reaching into the test runner or the process."""
        changes = self.changes()
        return [p for p, t in changes.items() if t and tampers(self._initial.get(p), t)]

    # -- verification -----------------------------------------------------------------------

    def _tree(self) -> dict[str, str]:
        assert self.workspace is not None
        return read_tree(self.workspace)

    def _code_changed(self) -> bool:
        """Whether the package's code differs from the task's base (the
        ``imports_and_collects`` milestone needs a code edit): a Python file of the
        package whose syntax tree, docstrings left out, differs from the base's. Comments,
        blank lines, docstrings and files elsewhere do not count."""
        roots = self._code_roots()
        return any(
            path.startswith(roots) and path.endswith(".py") and code_of(text) is not None
            and code_of(text) != code_of(self._initial.get(path) or "")
            for path, text in self.changes().items()
        )  # fmt: skip

    def _code_roots(self) -> tuple[str, ...]:
        """Path prefixes of the package's code in the workspace."""
        return (self.task.spec["repo"] + "/",)

    def _original_files(self) -> Mapping[str, str]:
        """The correct code of the task's package (its tests left out), path -> text."""
        return fixtures.source_files(self.task.spec["repo"])

    def changes(self) -> Changes:
        """The workspace diff against the task's base (cached until the next write)."""
        if self._changes is None:
            self._changes = diff_trees(self._initial, self._tree())
        return self._changes

    def _verify(self) -> tuple[bool, str]:
        """The verdict (``probes``): the hidden tests' calls replayed on a fresh copy of the
        base with the diff applied, compared here with the correct code's observations;
        then the full hidden suite (regressions) on another fresh copy, with canaries.
        Both must pass; only the first decides what the policy's code cannot forge.

        Returns the verdict and what the policy may be told: built from what this process
        holds (the task's test names, the data's verdict per test, the diff's own paths),
        never from text the sandbox wrote, which hostile code controls (it once carried
        the hidden tests' source out through the results file's collection errors)."""
        assert self._template is not None
        spec = self.task.spec
        changes = self.changes()
        probe_set, data = self._observe_hidden(changes)
        run = self._run_hidden(changes)
        ran, why = grade(run, spec["fail_to_pass"], spec["pass_to_pass"])
        ran = ran and self._regression_free(run)
        ok = data.ok and ran
        logger.debug("%s: %s; test run: %s", self.task.id, data.describe(), why)
        detail = "all hidden tests pass" if ok else "the hidden tests do not pass"
        tampering = self._tampering()
        if tampering:  # a tampering fix earns nothing, not even the milestones below
            ok, detail = False, f"the fix reaches into the test runner ({', '.join(tampering)})"
        else:
            passed = all(run.passed(t) for t in spec["fail_to_pass"])
            self.progress.targets = data.ok and run.consistent and passed
            imports = data.problem is None
            if imports and run.consistent and not run.collect_errors and run.outcomes:
                self.progress.collects = self.progress.collects or self._code_changed()
        self.progress.verdict = ok
        if not ok and self.guidance:
            hints = "\n".join(f"Hint: {h}" for h in spec.get("hints", ()))
            known = [*spec["fail_to_pass"], *spec["pass_to_pass"]]
            failing = probes.failing_tests(known, probe_set, data)
            detail = f"{detail}\nFailing hidden tests: {failing}\n{hints}"
        return ok, detail

    def _regression_free(self, run: TestRun) -> bool:
        """No test of the run fails (the visible tests run beside the hidden ones)."""
        return not run.failing

    def _observe_hidden(self, changes: Changes) -> tuple[probes.ProbeSet, probes.Comparison]:
        """The probes that grade the task and how the calls they hold fare on the base
        with ``changes`` applied (compared here, outside the sandbox)."""
        assert self._template is not None
        probe_set = probes.load(self.task.spec["repo"])
        data = probes.observe(
            self.runner, self.spaces, self._template, changes, probe_set, "hidden"
        )
        return probe_set, data

    def _run_hidden(self, changes: Changes) -> TestRun:
        """The hidden and visible suites, with canaries, on a fresh copy of the base with
        ``changes`` applied (the hidden tests mounted read-only)."""
        assert self._template is not None
        spec = self.task.spec
        scratch = self.spaces.scratch_copy(self._template)
        try:
            apply_changes(scratch, changes, skip_protected=True)
            hidden = fixtures.repo_dir(spec["repo"]) / HIDDEN_AT
            return self.runner.run(
                scratch,
                [HIDDEN_AT, VISIBLE_AT],  # the visible tests are the task's, never the diff's
                timeout_s=VERIFY_TIMEOUT_S,
                mount=(hidden, HIDDEN_AT),
                controls=[*spec["fail_to_pass"], *spec["pass_to_pass"]],
            )
        finally:
            remove_tree(scratch)

    # -- world hooks ------------------------------------------------------------------------

    def _load_task(self, task: Task) -> None:
        spec = task.spec
        with AST_LOCK:  # the mutator parses: envs may reset in threads
            files = tasks.mutated_files(spec)
        self._template, self._initial = self.spaces.template(
            task.id, fixtures.repo_dir(spec["repo"]), files
        )
        self._mutated = frozenset(files)
        self.workspace = self.spaces.fresh(self._template)
        self.progress = Progress()
        self._changes = {}
        self._failure = None

    def _get_world(self) -> Any:
        return (tuple(self.changes().items()), self.progress.as_items())

    def _set_world(self, world: Any) -> None:
        assert self._template is not None
        changes, progress = world
        self.workspace = self.spaces.fresh(self._template)
        apply_changes(self.workspace, dict(changes), skip_protected=False)
        self.progress = Progress.from_items(progress)
        self._changes = dict(changes)
        self._failure = None

    def render_view(self) -> str:
        changed = len(self.changes())
        return f"[repository: {changed} file{'s' if changed != 1 else ''} changed]"

    def reset_view(self) -> str:
        return f"Repository root:\n{self.list_dir('.').text}\n{self.render_view()}"

    def system_rules(self) -> str:
        return SYSTEM_RULES

    def _milestones(self) -> Sequence[Milestone]:
        return self._milestone_list

    def before_verify(self) -> None:
        """The step budget triggers the verification too (a failed final submit was
        verified already): its verdict is recorded for :meth:`_goal_reached`."""
        p = self.progress
        if self.steps_taken >= self.step_budget and not p.verdict and not p.final:
            try:
                self._verify()
            except (SandboxError, OSError) as exc:
                self._failure = f"the sandbox failed during verification: {exc}"

    def env_failure(self) -> str | None:
        return self._failure

    def _goal_reached(self) -> bool:
        return bool(self.progress.verdict)

    def step_check_specs(self) -> Sequence[StepCheckSpec]:
        return (*GENERIC_SPECS, TESTS_PASSING)

    def step_checks(self, facts: StepFacts) -> Sequence[StepCheck]:
        """The core's checks and ``tests_passing``: the level ``run_tests`` measured for
        the code as it is now (0 when it never measured it)."""
        level = self.visible.level(self.task.id, self.changes())
        return refined(super().step_checks(facts), StepCheck("tests_passing", level))

    def _dead_end(self) -> str | None:
        if self.progress.final and not self.progress.verdict:
            return "the submitted fix fails hidden tests"
        return None

    def extra_info(self) -> Mapping[str, Any]:
        return {"sandbox": dict(self._sandbox)}

    def _close(self) -> None:
        self.spaces.close()
        self.runner.close()
        self.backend.close()

    # -- oracle and generation ----------------------------------------------------------------

    def oracle(self) -> ScriptOracle:
        """Replays the gold fix from the current state (edits already applied are skipped)."""
        assert self.workspace is not None
        actions = []
        for action in self.task.solution:
            call = json.loads(action) if action.startswith("{") else None
            if call is not None and call["name"] == "edit":
                path = self._path(call["arguments"]["path"])
                if path is None or call["arguments"]["old"] not in path.read_text():
                    continue  # already fixed on this branch
            actions.append(action)
        return ScriptOracle(actions)

    @classmethod
    def generate_task(cls, seed: int, difficulty: str, split: str) -> Task | None:
        return tasks.generate(seed, difficulty, split)

    @classmethod
    def task_key(cls, task: Task) -> Any:
        return (task.spec["repo"], tuple(s["key"] for s in task.spec["sites"]))


__all__ = [
    "RepoFixEnv",
    "ScriptOracle",
    "choose_backend",
    "grade",
    "relative_path",
    "solution_actions",
]
