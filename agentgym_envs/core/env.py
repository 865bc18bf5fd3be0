"""The env base class: a ``gymnasium.Env[str, str]`` with a fixed step order.

``step`` runs parse -> gate -> execute -> observe -> milestones -> verify -> reward ->
outcome. A family subclasses :class:`AgentEnv`, declares tools as methods decorated with
:func:`~agentgym_envs.core.tools.tool`, and fills in the world hooks; it never rewrites
the loop (MiniGrid's template-method pattern).
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, Self

import gymnasium as gym

from agentgym_envs.core.actions import ActionParser, ParsedAction, read_action
from agentgym_envs.core.calls import CallRecord, CallRunner, Turn, fresh_arguments
from agentgym_envs.core.errors import (
    ConfigError,
    HookNotImplementedError,
    ResetNeeded,
    SchemaError,
    StateError,
)
from agentgym_envs.core.faults import FaultConfig
from agentgym_envs.core.gates import SafetyGate
from agentgym_envs.core.hooks import HOOKS
from agentgym_envs.core.info import (
    OUTCOME_TEXT,
    STANDARD_KEYS,
    ErrorCode,
    ErrorInfo,
    Outcome,
    SafetyInfo,
    SeedsInfo,
    StepInfo,
    ToolCallInfo,
    ToolStatus,
    VersionsInfo,
    family_keys_only,
)
from agentgym_envs.core.ledger import CostLedger
from agentgym_envs.core.native import ToolMode, native_turn, record_replies, system_prompt
from agentgym_envs.core.rewards import COMPONENTS, RewardConfig, RewardTally, reward_config_from
from agentgym_envs.core.spaces import TextSpace, sanitize
from agentgym_envs.core.staging import EffectsGate, StagedEffects
from agentgym_envs.core.state import EnvState, fingerprint
from agentgym_envs.core.step_checks import StepCheckHooks, check_budget, settle_step
from agentgym_envs.core.tasks import DEFAULT_COUNTS, Task, TaskSet, load_task_set
from agentgym_envs.core.tools import ToolCall, ToolResult, ToolSet
from agentgym_envs.core.validation import check_kwargs, check_reset_options, play_validation
from agentgym_envs.core.variants import Variant, check_variant, localize, localizing, rename_calls
from agentgym_envs.core.verifiers import Invariant, Milestone, MilestoneTracker, verify

logger = logging.getLogger(__name__)


class Oracle(Protocol):
    """A scripted solver bound to one env; it reads the env's true state."""

    def act(self) -> str:
        """The next action text that leads to success from the current state."""
        ...


class AgentEnv(StepCheckHooks, gym.Env[str, str], ABC):
    """Base class of every agentgym env. See docs/architecture.md section 2 for the contract.

    Args:
        render_mode: None or ``"ansi"`` (``render()`` returns the current view as text).
        split: the default split reset samples from (``train``, ``test``, ``ood``).
        difficulty: the default difficulty, or None for all.
        reward_config: the reward weights; ``RewardConfig()`` by default. A dict of its
            fields (e.g. ``{"local_weight": 0.05}`` from JSON kwargs) is accepted too.
        max_steps: a step budget overriding the task's own.
        max_errors: end the episode (``TIMEOUT``) after this many policy errors.
        max_cost: end the episode (``TIMEOUT``) once the ledger cost exceeds this.
        max_calls_per_step: how many tool calls one action may hold.
        timing: ``"virtual"`` charges each tool its nominal duration, so ``info`` is
            deterministic; ``"wall"`` measures real time.
        tool_retries: retries of a tool whose backend raises ``TransientToolError``.
        tasks: use these tasks instead of the env's task set (your own task file,
            loaded with ``load_task_set``, or a list of ``Task``).
        faults: inject labelled infrastructure faults into tool calls: a
            ``FaultConfig`` or a dict such as ``{"rate": 0.1}`` (see ``core.faults``).
            The one place faults are configured: ``gym.make(id, faults=...)``, a
            trainer's or a suite entry's ``env_kwargs``.
        tool_mode: ``"text"`` (default) or ``"native"``: tools passed natively to the
            model, ``info["messages"]`` per step (see ``core.native``).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}

    # -- what a family declares --------------------------------------------------------
    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    version: ClassVar[str] = "1"
    verifier_version: ClassVar[str] = "1"
    task_file: ClassVar[str] = ""
    task_dir: ClassVar[Path | None] = None  # task_file's folder; None: agentgym's tasks/
    accepts_messages: ClassVar[bool] = False
    example_action: ClassVar[str] = ""
    noop_action: ClassVar[str] = ""
    max_observation_chars: ClassVar[int] = 16384
    max_action_chars: ClassVar[int] = 8192
    task_counts: ClassVar[Mapping[str, int]] = DEFAULT_COUNTS  # per split and difficulty
    conformance_episodes: ClassVar[int] = 50  # oracle episodes per difficulty in `check`
    toolset: ToolSet  # the class's tools; an instance may swap in renamed ones (tool OOD)
    HOOKS: ClassVar[Mapping[str, str]] = HOOKS  # the methods a family may override (core.hooks)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.toolset = ToolSet.from_class(cls)
        staged = [t.name for t in cls.toolset.values() if t.staged]
        if staged and cls.stage_call is AgentEnv.stage_call:
            raise SchemaError(
                f"{cls.__name__}: tools {staged} are staged (@tool(staged=True)) but the class "
                "defines no stage_call(call); define it to run them on a scratch copy"
            )
        own = cls.__dict__.get("oracle")
        if own is not None and not getattr(own, "__isabstractmethod__", False):
            # under a tool variant, oracle actions use the renamed tools (core.variants)
            setattr(cls, "oracle", localizing(own))  # noqa: B010  (mypy: no method assign)
        if "on_message" in cls.__dict__:  # native mode tells the user's replies apart
            setattr(cls, "on_message", record_replies(cls.__dict__["on_message"]))  # noqa: B010

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        check_kwargs(cls, kwargs)  # a did-you-mean, not a raw TypeError naming AgentEnv
        return super().__new__(cls)

    def __init__(
        self,
        *,
        render_mode: str | None = None,
        split: str = "train",
        difficulty: str | None = None,
        reward_config: RewardConfig | Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        max_errors: int | None = None,
        max_cost: float | None = None,
        max_calls_per_step: int = 1,
        timing: Literal["virtual", "wall"] = "virtual",
        tool_retries: int = 2,
        tasks: TaskSet | Sequence[Task] | None = None,
        faults: FaultConfig | Mapping[str, Any] | None = None,
        tool_mode: ToolMode | str = ToolMode.TEXT,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode must be None or one of {self.metadata['render_modes']}, "
                f"got {render_mode!r}"
            )
        if timing not in ("virtual", "wall"):
            raise ConfigError(f"timing must be 'virtual' or 'wall', got {timing!r}")
        for label, value in (("max_steps", max_steps), ("max_errors", max_errors)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError(f"{label} must be a positive int or None, got {value!r}")
        if max_calls_per_step < 1:
            raise ConfigError(f"max_calls_per_step must be >= 1, got {max_calls_per_step}")
        self.render_mode = render_mode
        self.reward_config = reward_config_from(reward_config)  # or a dict of its fields
        self.max_steps = max_steps
        self.max_errors = max_errors
        self.max_cost = max_cost
        self.timing = timing
        self.tool_retries = tool_retries
        self.tool_mode = ToolMode.coerce(tool_mode)
        self._native = native_turn(self)
        # the call runner holds the one fault config (``faults`` reads it back)
        self.calls = CallRunner(timing, tool_retries, FaultConfig.coerce(faults))
        self.observation_space = TextSpace(self.max_observation_chars)
        self.action_space = TextSpace(self.max_action_chars, min_length=0)
        if tasks is None:
            self.task_set: TaskSet = load_task_set(self.task_file, self.task_dir)
        elif isinstance(tasks, TaskSet):
            self.task_set = tasks
        else:
            self.task_set = TaskSet.from_tasks(self.name, tasks)
        self._check_split(split, difficulty)
        self.split = split
        self.difficulty = difficulty
        self.max_calls_per_step = max_calls_per_step
        self.parser = self._parser_for(self.toolset)
        self.gates: list[SafetyGate[Self]] = []
        self.effect_gates: list[EffectsGate[Self]] = []  # over staged effects (core.staging)
        self._renamed: dict[str, ToolSet] = {}
        self._tool_variant: Variant | None = None
        self.ledger = CostLedger()
        self._tally = RewardTally()
        self._task: Task | None = None
        self._tracker = MilestoneTracker(())
        self._invariant_list: Sequence[Invariant] = ()
        self._outcome = Outcome.CONTINUE
        self._reason: str | None = None
        self._step = 0
        self._budget = 0
        self._history: list[str] = []
        self._visits: dict[Any, int] = {}
        self._seeds: SeedsInfo | None = None  # set by reset and set_state
        self._last_obs = ""
        self._system: str | None = None
        self._closed = False
        self.last_info: StepInfo | None = None  # what the last step returned (oracles)
        self._versions: VersionsInfo = {
            "env": self._env_version(),
            "tools": self.toolset.fingerprint,
            "reward": self.reward_version(),
            "verifier": self.verifier_version,
            "task_set": self.task_set.version,
        }

    # -- hooks a family implements -----------------------------------------------------

    @abstractmethod
    def _load_task(self, task: Task) -> None:
        """Build the world of ``task`` in its initial state."""

    @abstractmethod
    def _get_world(self) -> Any:
        """The world state as plain data that the caller owns (no shared mutables)."""

    @abstractmethod
    def _set_world(self, world: Any) -> None:
        """Restore the world from :meth:`_get_world` output."""

    @abstractmethod
    def render_view(self) -> str:
        """The agent's current view of the world (a board, a room, a page)."""

    @abstractmethod
    def _goal_reached(self) -> bool:
        """The goal verifier: True when the task is accomplished."""

    def oracle(self) -> Oracle:
        """A scripted solver that reaches success from the current state (optional)."""
        raise HookNotImplementedError(f"define {self.name}.oracle(): `agentgym check` plays it")

    @classmethod
    def generate_task(cls, seed: int, difficulty: str, split: str) -> Task | None:
        """Generate one validated task from a seed, or None if the draw is rejected."""
        raise HookNotImplementedError(f"define {cls.name}.generate_task() to build tasks")

    def oracle_success_probability(self) -> float:
        """The exact probability that :meth:`oracle` succeeds from the current state: 1.0
        for deterministic envs; stochastic ones (slippery FrozenLake) compute it for tests."""
        return 1.0

    @classmethod
    def task_key(cls, task: Task) -> Any:
        """Hashable data identifying a task's initial state (to keep generated tasks unique)."""
        return json.dumps(task.spec, sort_keys=True)

    @classmethod
    def validate_task(cls, task: Task, **env_kwargs: Any) -> str | None:
        """Check a generated task: not solved at reset, its solution succeeds, and the
        do-nothing policy (``noop_action`` every step) does not. The solution is the
        stored one, or, for tasks that store none (actions that depend on the live
        world, such as a web page's element ids), the live oracle's. Returns why the
        task is invalid, or None."""
        return play_validation(cls(tasks=[task], split=task.split, **env_kwargs), task)

    def reset_view(self) -> str:
        """The view shown under the instruction at reset; ``render_view()`` by default."""
        return self.render_view()

    def _generate(self, seed: int, difficulty: str, split: str) -> Task | None:
        """Generate a task for ``reset(options={"task_seed": ...})`` (instance options
        such as a world size may shape it); ``generate_task`` by default."""
        return self.generate_task(seed, difficulty, split)

    def _world_key(self) -> Any:
        """Hashable plain data identifying the world state (visits and ``state_hash``)."""
        return self._get_world()

    def _milestones(self) -> Sequence[Milestone]:
        """The current task's milestones."""
        return ()

    def _invariants(self) -> Sequence[Invariant]:
        """The current task's invariants (collateral-damage checks)."""
        return ()

    def _dead_end(self) -> str | None:
        """Why the goal can no longer be reached, or None."""
        return None

    def variant(self) -> str:
        """A suffix for ``versions["env"]`` naming constructor options that change the
        dynamics (``+slippery``); empty by default."""
        return ""

    def system_rules(self) -> str:
        """The env's standing rules for the system prompt."""
        return ""

    def on_message(self, text: str) -> ToolResult:
        """Handle a plain-text message to the user (only where ``accepts_messages``)."""
        return ToolResult.failure(ErrorCode.PARSE_ERROR, "this env has no user to talk to")

    def after_call(self, call: ToolCall, result: ToolResult | None) -> None:
        """Called after a tool's handler ran (even if a fault then hid its answer)."""

    def on_observation(self, text: str) -> None:
        """Called with every observation the agent is shown (to track what it has seen)."""

    def stage_call(self, call: ToolCall) -> StagedEffects:
        """Run a staged tool's call (``@tool(staged=True)``) on a scratch copy of the world
        and return its effects, uncommitted; ``effect_gates`` then check them and the
        tool's handler commits them (``core.staging``). Raise only when the environment
        broke (``ENV_ERROR``); a policy-side problem goes in the effects, for the handler
        to report. Required for envs with staged tools."""
        raise HookNotImplementedError(f"{self.name} has staged tools but no stage_call()")

    def before_verify(self) -> None:
        """Compute what the verifiers read, once per step whose calls did not end the
        episode, after the milestones were updated and before the goal, invariants and
        dead end are checked (e.g. grade the work when the step budget runs out). The
        verifiers themselves only read state; this is where state is computed."""

    def env_failure(self) -> str | None:
        """Why the environment itself broke outside a tool call (a sandbox crash while
        :meth:`before_verify` graded), or None. Checked right after it: a failure ends the
        episode with ``ENV_ERROR`` (masked from training), never as the policy's failure."""
        return None

    def extra_info(self) -> Mapping[str, Any]:
        """Family-specific keys added to every ``info`` (reset and step), as plain data
        the caller owns; they may not shadow the standard keys (``core.info.StepInfo``)."""
        return {}

    def _close(self) -> None:
        """Release processes, files and ports (called once by :meth:`close`)."""

    # -- the Gymnasium API -------------------------------------------------------------

    def reset(  # type: ignore[override]  # see _GYM_INFO_NOTE
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, StepInfo]:
        """Start an episode. The same (seed, options) gives the same episode, byte for byte.

        Without a seed, the env draws one from its RNG and reports it in
        ``info["seeds"]["env"]``, so every episode can be replayed from its info.

        Options: ``task_id``, ``split``, ``difficulty``, ``task_seed`` (generate a fresh
        task from this seed instead of using the task set), ``verifier_seed``.
        """
        self._check_open()
        opts = self._check_options(options)
        if seed is None:
            if self._np_random is None:
                super().reset(seed=None)
            seed = int(self.np_random.integers(0, 2**31 - 1))
        super().reset(seed=seed)
        self.last_info = None
        task = self._select_task(opts)
        self._start(task)
        self.calls.start_episode(seed)
        # verifiers default to the episode seed, so every seed in info is an int
        verifier_seed = int(opts.get("verifier_seed", seed))
        self._seeds = SeedsInfo(env=seed, task=task.seed, verifier=verifier_seed)
        self._visits = {self._world_key(): 1}
        check_budget(self)  # a local_weight too large for this step budget raises
        obs = sanitize(f"{task.instruction}\n\n{self.reset_view()}", self.max_observation_chars)
        self._last_obs = obs
        self.on_observation(obs)
        self.ledger.chars_out += len(obs)
        components = dict.fromkeys(COMPONENTS, 0.0)
        info = self._info(Outcome.CONTINUE, [], {}, [], components, {}, 1)
        if self._system is None:  # the rules depend on constructor options only
            self._system = sanitize(system_prompt(self), self.max_observation_chars)
        info["system"] = self._system
        if self._native is not None:
            info["messages"] = [{"role": "user", "content": obs}]
        return obs, info

    def step(  # type: ignore[override]  # see _GYM_INFO_NOTE
        self, action: str
    ) -> tuple[str, float, bool, bool, StepInfo]:
        """Run one action: parse, gate, execute, observe, milestones, verify, reward."""
        self._check_open()
        if self._task is None:
            raise ResetNeeded("call reset() before step()")
        if self._outcome is not Outcome.CONTINUE:
            raise ResetNeeded(f"the episode ended ({self._outcome.value}); call reset()")
        # valid Unicode from here on (core.unicode): nothing a policy sends makes info unencodable
        action, parsed = read_action(self.parser, action, self._native, self._step + 1)
        self._step += 1
        self.ledger.chars_in += len(action)
        turn = self._execute(parsed)
        outcome, errors = turn.outcome, turn.errors
        self.ledger.errors += errors
        new: list[str] = []
        share = 0.0
        if outcome is Outcome.CONTINUE:
            new, share = self._tracker.update()
            self.before_verify()
            failure = self.env_failure()
            if failure is not None:
                outcome, self._reason = Outcome.ENV_ERROR, failure
            else:
                outcome, self._reason = verify(
                    self._goal_reached, self._invariant_list, self._dead_end
                )
            if outcome is Outcome.CONTINUE:
                outcome, self._reason = self._check_budgets()
        elif outcome is Outcome.SAFETY_STOP:
            new, share = self._tracker.update()
            self._reason = turn.safety.get("reason")
        components, checks = settle_step(self, turn, outcome, share, new)  # core.step_checks
        self._outcome = outcome
        key = self._world_key()
        visits = self._visits[key] = self._visits.get(key, 0) + 1
        self._history.append(parsed.canonical)
        obs = sanitize(
            self._observation(turn.results, turn.error, outcome), self.max_observation_chars
        )
        self.ledger.chars_out += len(obs)
        self._last_obs = obs
        self.on_observation(obs)
        info = self._info(outcome, turn.calls, turn.error, new, components, turn.safety, visits)
        if checks:  # only with RewardConfig.local_weight > 0
            info["step_checks"] = checks
        if self._native is not None:
            info["messages"] = self._native.finish(bool(turn.error) and not turn.results)
        self.last_info = info
        terminated = outcome in (Outcome.SUCCESS, Outcome.FAILURE, Outcome.SAFETY_STOP)
        truncated = outcome in (Outcome.TIMEOUT, Outcome.ENV_ERROR)
        return obs, sum(components.values()), terminated, truncated, info

    def _execute(self: Self, parsed: ParsedAction) -> Turn:
        """Steps 2-3 of the loop: gate and run each parsed call (or deliver a message)."""
        turn = Turn()
        if parsed.error_code is not None:
            turn.error = parsed.error_info(self._hint(parsed))
            turn.errors = 1
            return turn
        if parsed.message is not None:
            reply = self.on_message(parsed.message)
            turn.results.append(reply)
            if reply.error_code is not None:
                turn.error = {"code": str(reply.error_code), "message": reply.text}
                turn.errors = 1
            return turn
        for i, call in enumerate(parsed.calls):
            record = CallRecord(ToolStatus.SKIPPED, None)
            if turn.outcome is Outcome.CONTINUE:
                spec = self.toolset.canonical(call.name)
                record = self.calls.run(self, spec, call, self.gates, self.effect_gates)
                self._account(call.name, record)
                if record.executed:
                    self.after_call(call, record.committed or record.result)
                turn.outcome = record.outcome
                turn.cost += record.cost
                turn.safety = record.safety or turn.safety
                result = record.result
                if result is not None:
                    turn.results.append(result)
                    if result.error_code is not None:
                        turn.error = {"code": str(result.error_code), "message": result.text}
                        turn.errors += record.status is ToolStatus.BLOCKED
            if (native := self._native) is not None:
                native.answer(i, record.result, record.status)
            turn.calls.append(
                {
                    "name": call.name,
                    "arguments": fresh_arguments(call.arguments),
                    "call_id": native.call_id(i) if native else f"call_{self._step}_{i}",
                    "status": record.status,
                    "latency_ms": record.latency_ms,
                    "fault": record.fault,
                }
            )
            if native is not None and i in native.replaced:  # the model's id was unsafe
                turn.calls[-1]["id_replaced"] = True
        return turn

    def render(self) -> str | None:
        """In ``ansi`` mode, the current view as text."""
        if self.render_mode == "ansi":
            return self.render_view() if self._task is not None else ""
        return None

    def close(self) -> None:
        """Release resources. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._close()

    # -- configuration between episodes ------------------------------------------------

    @property
    def faults(self) -> FaultConfig | None:
        """The fault config in force (``core.faults``), or None: the ``faults`` argument,
        the one place faults are configured (so ``env.spec`` rebuilds them)."""
        return self.calls.faults

    def set_tool_variant(
        self, names: Mapping[str, str] | None = None, descriptions: Mapping[str, str] | None = None
    ) -> None:
        """Rename (``names``: canonical -> shown) and re-describe (``descriptions``) tools
        from the next ``reset`` on (tool OOD), over a task's own renames. The parser,
        ``info["tools"]`` and the system prompt follow; :meth:`oracle` actions are
        rewritten (:meth:`localize_action`). No arguments: drop the variant.

        Raises:
            ConfigError: an unknown tool, a name that is no identifier, a name clash.
        """
        self._tool_variant = check_variant(type(self).toolset, names, descriptions, self.name)

    @property
    def tool_variant(self) -> Variant | None:
        """The (names, descriptions) set by :meth:`set_tool_variant`, or None."""
        v = self._tool_variant
        return None if v is None else (dict(v[0]), dict(v[1]))

    def localize_action(self, action: str) -> str:
        """Under a renaming tool variant, an action that calls tools by canonical (or the
        task's) names, rewritten in JSON form to call them by the names the agent sees.
        Anything else (messages, unknown names, unparsable text) comes back unchanged."""
        return action if self._task is None else localize(self, action)

    # -- snapshots ---------------------------------------------------------------------

    def get_state(self) -> EnvState:
        """Snapshot the whole episode: world, history, RNG, ledger, rewards, milestones."""
        if self._task is None:
            raise ResetNeeded("call reset() before get_state()")
        episode = {
            "task": self._task,
            "step": self._step,
            "budget": self._budget,
            "outcome": self._outcome,
            "reason": self._reason,
            "history": tuple(self._history),
            "ledger": self.ledger.get_state(),
            "tally": self._tally.as_tuple(),
            "milestones": tuple(self._tracker.reached),
            "rng": self.np_random.bit_generator.state,
            "visits": dict(self._visits),
            "seeds": None if self._seeds is None else self._seeds.copy(),
            "last_obs": self._last_obs,
            "calls": self.calls.get_state(),
        }
        return EnvState(self.name, self.version, self._task.id, self._get_world(), episode)

    def set_state(self, state: EnvState) -> None:
        """Restore a snapshot taken by :meth:`get_state` (of this env id and version)."""
        self._check_open()
        if not isinstance(state, EnvState):
            raise StateError(f"set_state expects an EnvState, got {type(state).__name__}")
        if (state.env, state.version) != (self.name, self.version):
            raise StateError(
                f"snapshot is from {state.env}-v{state.version}, this env is "
                f"{self.name}-v{self.version}; restore it into the env that took it"
            )
        ep = state.episode
        task: Task = ep["task"]
        if self._task is not task and self._task != task:
            self._start(task)
        self._set_world(state.world)
        self._wasted_step = -1  # a restored branch: its next step is not the one marked
        self._step, self._budget = ep["step"], ep["budget"]
        self._outcome, self._reason = ep["outcome"], ep["reason"]
        self._history = list(ep["history"])
        self.ledger.set_state(ep["ledger"])
        self._tally = RewardTally(*ep["tally"])
        self._tracker.restore(ep["milestones"])
        self.np_random.bit_generator.state = ep["rng"]
        self._visits = dict(ep["visits"])
        seeds = ep["seeds"]
        self._seeds = SeedsInfo(env=seeds["env"], task=seeds["task"], verifier=seeds["verifier"])
        self._last_obs = ep["last_obs"]
        self.calls.set_state(ep["calls"])

    def state_hash(self) -> str:
        """A fingerprint of the world state (not of the episode bookkeeping)."""
        if self._task is None:
            raise ResetNeeded("call reset() before state_hash()")
        return fingerprint((self.name, self._task.id, self._world_key()))

    # -- read-only views ---------------------------------------------------------------

    @property
    def task(self) -> Task:
        """The current task."""
        if self._task is None:
            raise ResetNeeded("call reset() first")
        return self._task

    @property
    def outcome(self) -> Outcome:
        return self._outcome

    @property
    def steps_taken(self) -> int:
        return self._step

    @property
    def step_budget(self) -> int:
        return self._budget

    @property
    def milestones_reached(self) -> tuple[str, ...]:
        return tuple(self._tracker.reached)

    @property
    def action_history(self) -> tuple[str, ...]:
        """The canonical form of each action taken this episode (for dedup and replay)."""
        return tuple(self._history)

    # -- internals ---------------------------------------------------------------------

    def _start(self, task: Task) -> None:
        self._task = task
        self._use_tools(task)
        self._load_task(task)
        # a milestone that already holds in the initial state is no progress: never pay it
        self._tracker = MilestoneTracker([m for m in self._milestones() if not m.check()])
        self._invariant_list = tuple(self._invariants())
        self.ledger = CostLedger()
        self._tally = RewardTally()
        self._outcome, self._reason = Outcome.CONTINUE, None
        self._step = 0
        self._wasted_step = -1
        self._budget = self.max_steps or task.max_steps
        self._history = []

    def _example(self) -> str:
        """``example_action`` with the tool names this episode uses."""
        return rename_calls(self.toolset, self.example_action)

    def _env_version(self) -> str:
        faults, native = self.calls.faults, "+native" if self._native is not None else ""
        return f"{self.name}-v{self.version}{self.variant()}{native}" + (
            faults.tag if faults else ""
        )

    def _parser_for(self, tools: ToolSet) -> ActionParser:
        return ActionParser(
            tools,
            accepts_messages=self.accepts_messages,
            max_calls=self.max_calls_per_step,
            max_chars=self.max_action_chars,
        )

    def _use_tools(self, task: Task) -> None:
        """Rename tools as the task says (``spec["tool_names"]``, tool OOD), else use the
        class's tools. The parser, system prompt and tools version follow."""
        spec = task.spec if isinstance(task.spec, Mapping) else {}
        names = spec.get("tool_names") or {}
        described = spec.get("tool_descriptions") or {}
        if self._tool_variant is not None:  # the variant overrides the task's renames
            names = {**names, **self._tool_variant[0]}
            described = {**described, **self._tool_variant[1]}
        key = json.dumps([names, described], sort_keys=True)
        tools = type(self).toolset if not (names or described) else self._renamed.get(key)
        if tools is None:
            if len(self._renamed) >= 256:  # per-episode variants must not grow it forever
                self._renamed.clear()
            tools = self._renamed[key] = type(self).toolset.renamed(names, described)
        if tools is not self.toolset:
            self.toolset = tools
            self.parser = self._parser_for(tools)
            self._versions["tools"] = tools.fingerprint
            self._system = None

    def _account(self, name: str, record: CallRecord) -> None:
        if record.outcome is Outcome.ENV_ERROR:
            self._reason = record.failure
        if record.fault:
            self.ledger.faults += 1
        if record.cost or record.status in (ToolStatus.OK, ToolStatus.ERROR):
            self.ledger.charge(name, record.cost)
            self.ledger.env_time_ms += record.latency_ms

    def _check_budgets(self) -> tuple[Outcome, str | None]:
        if self._step >= self._budget:
            return Outcome.TIMEOUT, f"step budget of {self._budget} used up"
        if self.max_errors is not None and self.ledger.errors >= self.max_errors:
            return Outcome.TIMEOUT, f"error budget of {self.max_errors} used up"
        if self.max_cost is not None and self.ledger.total > self.max_cost:
            return Outcome.TIMEOUT, f"cost budget of {self.max_cost} used up"
        return Outcome.CONTINUE, None

    def _observation(self, results: list[ToolResult], error: ErrorInfo, outcome: Outcome) -> str:
        parts = [r.text for r in results]
        if error and not results:
            parts.append(f"Error ({error['code']}): {error['message']}")
        if outcome is not Outcome.CONTINUE:
            parts.append(OUTCOME_TEXT[outcome].format(reason=self._reason or ""))
        parts.append(self.render_view())
        if self._native is not None:
            self._native.tail = parts[len(results) :]
        return "\n\n".join(parts)

    def _hint(self, parsed: ParsedAction) -> str:
        """The parser's error, with the example action where the agent did not call a tool
        yet; bad arguments of a known tool name that tool's signature instead, and an
        example of another tool would only mislead."""
        message = parsed.error_message or "invalid action"
        if self.example_action and parsed.error_code != ErrorCode.BAD_ARGUMENTS:
            end = " " if message.endswith((".", "!", "?")) else ". "
            message += f"{end}Example of a valid action: {self._example()}"
        return message

    def _info(
        self,
        outcome: Outcome,
        calls: list[ToolCallInfo],
        error: ErrorInfo,
        new: list[str],
        components: dict[str, float],
        safety: SafetyInfo,
        visits: int,
    ) -> StepInfo:
        task, seeds = self._task, self._seeds
        assert task is not None and seeds is not None  # reset (or set_state) set both
        info: StepInfo = {
            "outcome": outcome,
            "tools": self.toolset.schemas(),
            "tool_calls": calls,
            "error": error,
            "milestones": list(self._tracker.reached),
            "new_milestones": new,
            "reward_components": components,
            "cost": self.ledger.snapshot(),
            "safety": safety,
            "versions": self._versions.copy(),
            "seeds": seeds.copy(),
            "task": {
                "id": task.id,
                "split": task.split,
                "difficulty": task.difficulty,
                "instruction": task.instruction,
            },
            "episode_valid": outcome is not Outcome.ENV_ERROR,
            "step": self._step,
            "state_visits": visits,
        }
        if outcome is Outcome.ENV_ERROR:
            info["env_error"] = {"code": "env_error", "message": self._reason or ""}
        extra = self.extra_info()
        if extra:
            if not family_keys_only(extra):
                raise ConfigError(
                    f"{type(self).__name__}.extra_info() returned the standard info keys "
                    f"{sorted(STANDARD_KEYS.intersection(extra))}; expected family-specific "
                    "keys only: rename them"
                )
            info.update(extra)
        return info

    def _check_open(self) -> None:
        if self._closed:
            raise ResetNeeded(f"{self.name} env is closed; make a new one with gym.make")

    def _check_split(self, split: str, difficulty: str | None) -> None:
        self.task_set.pool(split, difficulty)  # raises TaskNotFoundError with a suggestion

    def _check_options(self, options: Mapping[str, Any] | None) -> dict[str, Any]:
        return check_reset_options(options)

    def _select_task(self, opts: Mapping[str, Any]) -> Task:
        if "task_id" in opts:
            return self.task_set.get(opts["task_id"])
        split = opts.get("split", self.split)
        difficulty = opts.get("difficulty", self.difficulty)
        if "task_seed" in opts:
            level = difficulty or self.task_set.difficulties[0]
            task = self._generate(int(opts["task_seed"]), level, split)
            if task is None:
                raise ConfigError(
                    f"task_seed {opts['task_seed']} was rejected by the {self.name} generator "
                    "(it yields no valid task); pick another task_seed"
                )
            return task
        pool = self.task_set.pool(split, difficulty)
        return pool[int(self.np_random.integers(len(pool)))]


# _GYM_INFO_NOTE: Gymnasium annotates ``info`` as ``dict[str, Any]``; reset and step
# return the precise StepInfo, a TypedDict (a plain dict at runtime) that mypy, lacking
# PEP 728, never treats as a ``dict[str, Any]``: only the checker sees a bad override.
