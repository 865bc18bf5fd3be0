"""Play an attack through the evaluator's path, where what a step returned is recorded,
stored, exported, reported and shown.

``run_attack`` judges what ``env.step`` returns. A policy's input can also get through
after the step: a lone surrogate in an action used to pass the env and then make the
recorder's store write raise at the episode's end, so the evaluator ended a wrong
answer as ``env_error`` (invalid, out of every success denominator): a policy could hide
its failures as the environment's. :func:`evaluator_verdict` replays the attack's script
as the policy of a one-episode evaluation: ``eval.evaluate.run_entry`` with an inline
slot (the evaluator's default) and the recorder writing into a fresh store; once the
script ends the policy sends empty actions until the env ends the episode. Then it
reads the episode back, exports it (``episodes-jsonl``), renders it as ``agentgym traj
show`` does and builds the report (JSON and Markdown). It got through if

* the episode ended as ``env_error`` or invalid (a policy's input is never the env's fault),
* any stage raised, or a step hung past the attack's ``step_limit_s``,
* the episode was not recorded,
* ``traj show`` would write a control character to the terminal,
* it scored SUCCESS without ``may_solve``.

To reuse it for another way of reaching an env (a server), give the attack the env id
of a Gymnasium env that reaches it: a registered id, or ``module:Id`` where importing
``module`` registers ``Id`` (the client env), with its ``env_kwargs``; every stage
after ``gym.make`` is the same.
"""

from __future__ import annotations

import io
import json
import tempfile
import time
from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.errors import ConfigError, EnvNotFoundError
from agentgym_envs.core.info import Outcome
from agentgym_envs.eval.evaluate import (
    EpisodeResult,
    EvalConfig,
    _close_stores,
    _Policies,
    build_report,
    run_entry,
)
from agentgym_envs.eval.suite import Job, Suite, SuiteEntry
from agentgym_envs.redteam.watchdog import Hang, watchdog
from agentgym_envs.registration import find

if TYPE_CHECKING:
    from agentgym_envs.redteam.core import Attack

RUN_ID = "redteam"
_OPTIONS = ("task_id", "split", "difficulty")


class ScriptPolicy:
    """An attack's script as a one-slot evaluator policy: it plays the script's actions
    (at most ``attack.max_steps``), then empty actions until the episode ends.

    Args:
        attack: the attack whose script to play.
        arm: re-arms the step watchdog before each step (``watchdog()``'s ``arm``).
    """

    name = "redteam"

    def __init__(self, attack: Attack, arm: Any = None) -> None:
        self.attack = attack
        self.arm = arm
        self.actions: list[str] = []
        self._script: Generator[str, tuple[str, dict[str, Any]], None] | None = None
        self._done = False

    def reset(self, indices: Sequence[int]) -> None:
        self._script, self._done, self.actions = None, False, []

    def act(
        self,
        observations: Sequence[str],
        infos: Sequence[Mapping[str, Any]],
        slots: Sequence[int] | None = None,
    ) -> list[str]:
        obs, info = observations[0], dict(infos[0])
        action: str | None = None
        if not self._done and len(self.actions) < self.attack.max_steps:
            try:
                if self._script is None:
                    self._script = self.attack.script(obs, info)
                    action = next(self._script)
                else:
                    action = self._script.send((obs, info))
            except StopIteration:
                action = None
        self._done = action is None or self._done
        if action is not None:
            self.actions.append(action)
        if self.arm is not None:
            self.arm(self.attack.step_limit_s)  # the step this action starts
        return ["" if action is None else action]


def evaluator_verdict(attack: Attack, workdir: str | Path | None = None) -> str | None:
    """Play ``attack`` through the evaluator's path (module docstring); why it got
    through there, or None. ``workdir`` keeps the store, export and report (default: a
    temporary folder, removed).

    Raises:
        ConfigError: the attack cannot be played as a suite entry (reset options other
            than ``task_id``, ``split`` and ``difficulty``; an env id that is neither a
            registered agentgym env nor ``module:Id``).
    """
    _entry(attack)  # a mistake in the attack raises here, before anything is judged
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="agentgym-redteam-") as tmp:
            return evaluator_verdict(attack, tmp)
    out = Path(workdir)
    out.mkdir(parents=True, exist_ok=True)
    stage = "the evaluation"
    try:
        with watchdog() as arm:
            arm(attack.step_limit_s)  # the reset
            result = _evaluate(attack, out / "trajectories.sqlite", arm)
            arm(0)
        stage = "reading, exporting and showing the stored episode"
        problem = _check_stored(out)
        stage = "the report"
        _report(attack, result, out)
    except Hang:
        return "a step hung past the watchdog in the evaluator path"
    except Exception as exc:  # anything escaping a stage is itself the finding
        return f"{stage} raised {exc!r:.300} in the evaluator path"
    episode = result.episode
    if episode.outcome is Outcome.ENV_ERROR or not episode.valid:
        return f"the policy's input became an env_error in the evaluator path: {episode.error}"
    if episode.outcome is Outcome.SUCCESS and not attack.may_solve:
        return "scored SUCCESS without solving the task (evaluator path)"
    return problem


def _evaluate(attack: Attack, store: Path, arm: Any) -> EpisodeResult:
    """The attack's one episode through ``run_entry``, recorded into ``store``."""
    entry = _entry(attack)
    job = Job(entry.name, str(attack.options.get("task_id", "")), 0, attack.seed)
    config = EvalConfig(batch=1, store=str(store), run_id=RUN_ID)
    try:
        (result,) = run_entry(entry, [job], "", _Scripted(ScriptPolicy(attack, arm)), config)
    finally:
        _close_stores()  # every store the evaluator opened here (attacks run one by one)
    return result


def _entry(attack: Attack) -> SuiteEntry:
    unknown = sorted(set(attack.options) - set(_OPTIONS))
    if unknown:
        raise ConfigError(
            f"attack {attack.name}: the evaluator path passes the reset options {_OPTIONS}, "
            f"not {unknown}; express the episode with those, or play it with evaluator=False"
        )
    if ":" not in attack.env_id:
        try:
            find(attack.env_id)
        except EnvNotFoundError:
            raise ConfigError(
                f"attack {attack.name}: the evaluator path makes its env as a suite entry "
                f"does, from a registered agentgym env or 'module:Id' where importing module "
                f"registers Id; got {attack.env_id!r}"
            ) from None
    difficulty = attack.options.get("difficulty")
    return SuiteEntry(
        name=attack.name,
        env=attack.env_id,
        split=str(attack.options.get("split", "")),
        difficulty=(str(difficulty),) if difficulty else (),
        tasks=1,
        env_kwargs=dict(attack.env_kwargs),
    )


class _Scripted(_Policies):
    """Serves the script policy where the evaluator builds a policy from its spec."""

    def __init__(self, policy: ScriptPolicy) -> None:
        super().__init__(0, {})
        self.policy = policy

    def get(self, spec: str, envs: Sequence[Any]) -> ScriptPolicy:
        return self.policy


def _check_stored(out: Path) -> str | None:
    """Read the episode back, export it and render it as ``traj show`` does."""
    from rich.console import Console

    from agentgym_envs.eval.export import export_episodes
    from agentgym_envs.eval.traj_cli import render_episode
    from agentgym_envs.store import TrajectoryStore

    with TrajectoryStore(out / "trajectories.sqlite") as store:
        found = store.query(run_id=RUN_ID)
        if len(found) != 1:
            return f"{len(found)} episodes were recorded in the evaluator path, expected 1"
        episode_id, episode = found[0]
        export_episodes(store, out / "episodes.jsonl", run_id=RUN_ID)
    screen = io.StringIO()
    Console(file=screen, width=160, force_terminal=False).print(render_episode(episode_id, episode))
    shown = screen.getvalue()
    controls = sorted({f"{ord(c):#04x}" for c in shown if _is_control(c)})
    if controls:
        return f"traj show writes control characters {controls} to the terminal"
    return None


def _is_control(char: str) -> bool:
    code = ord(char)
    return (code < 0x20 and char not in "\n\t") or 0x7F <= code < 0xA0


def _report(attack: Attack, result: EpisodeResult, out: Path) -> None:
    """Build the evaluation report and write it as JSON and Markdown (UTF-8)."""
    from agentgym_envs.eval.report import render_markdown

    entry = _entry(attack)
    suite = Suite("redteam", (entry,), 1, attack.seed)
    config = EvalConfig(batch=1, store=str(out / "trajectories.sqlite"), run_id=RUN_ID)
    label = ScriptPolicy.name
    policy = [{"id": label, "spec": {"attack": attack.name}}]
    report = build_report(suite, policy, config, [(label, entry, [result], 0.0)], time.time())
    text = json.dumps(report, indent=2, ensure_ascii=False)
    (out / "report.json").write_text(text, encoding="utf-8")
    (out / "report.md").write_text(render_markdown(report), encoding="utf-8")
