"""The evaluator: suites, pass@k / pass^k, env-error accounting, crashes, replay, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentgym_envs.cli import main
from agentgym_envs.core.episode import EpisodeSummary
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import Outcome
from agentgym_envs.eval.evaluate import (
    EpisodeResult,
    EvalConfig,
    evaluate,
    result_metrics,
)
from agentgym_envs.eval.metrics import (
    episode_metrics,
    ks_for,
    pass_at_k,
    pass_hat_k,
    task_pass_rates,
)
from agentgym_envs.eval.replay import replay
from agentgym_envs.eval.suite import available_suites, load_suite, suite_from_spec
from tests.eval import crashy

# -- estimators against hand computations -------------------------------------------------


def test_pass_at_k_and_pass_hat_k_by_hand() -> None:
    # n = k: pass@k is "any trial succeeded", pass^k is "every trial succeeded"
    assert pass_at_k(2, 1, 2) == 1.0 and pass_hat_k(2, 1, 2) == 0.0
    assert pass_at_k(3, 0, 3) == 0.0 and pass_hat_k(3, 3, 3) == 1.0
    # n > k (unbiased estimator): 5 trials, 2 successes, k = 2
    # pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; pass^2 = C(2,2)/C(5,2) = 1/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_hat_k(5, 2, 2) == pytest.approx(0.1)
    # k = 1 both reduce to the success fraction
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8) == pass_hat_k(8, 3, 1)
    # 4 trials, 3 successes, k = 3: pass^3 = C(3,3)/C(4,3) = 1/4; pass@3 = 1
    assert pass_hat_k(4, 3, 3) == pytest.approx(0.25) and pass_at_k(4, 3, 3) == 1.0
    with pytest.raises(ValueError, match="k must be"):
        pass_at_k(2, 1, 3)
    with pytest.raises(ValueError, match="successes"):
        pass_hat_k(2, 3, 1)


def test_pass_rates_average_tasks_and_skip_short_ones() -> None:
    # task A: 4 valid trials, 2 successes; task B: 4, 4; task C: 1 valid trial (env errors)
    at, hat, used = task_pass_rates([(4, 2), (4, 4), (1, 1)], [1, 2, 4])
    assert used == {"1": 3, "2": 2, "4": 2}
    assert at["1"] == pytest.approx((0.5 + 1 + 1) / 3)
    assert at["2"] == pytest.approx(((1 - 1 / 6) + 1) / 2)  # A: 1 - C(2,2)/C(4,2)
    assert hat["2"] == pytest.approx((1 / 6 + 1) / 2)  # A: C(2,2)/C(4,2)
    assert hat["4"] == pytest.approx((0 + 1) / 2) and at["4"] == pytest.approx(1.0)
    assert ks_for(4) == [1, 2, 4] and ks_for(6) == [1, 2, 4, 6] and ks_for(1) == [1]


def _ep(
    task: str, trial: int, outcome: str, cost: float = 0.0, faults: int = 0, violations: int = 0
) -> EpisodeResult:
    episode = EpisodeSummary(
        task_id=task,
        outcome=Outcome(outcome),
        valid=outcome != "env_error",
        cost={"total": cost, "faults": faults},
        violations=violations,
    )
    return EpisodeResult("p", "e", "agentgym/Sokoban-v0", task, trial, trial, episode)


def test_env_errors_are_excluded_and_counted_apart() -> None:
    eps = [
        _ep("a", 0, "success", cost=2.0),
        _ep("a", 1, "env_error"),
        _ep("b", 0, "failure", cost=4.0, faults=1),
        _ep("b", 1, "success", cost=2.0, faults=2, violations=1),
    ]
    m = result_metrics(eps)
    assert m == episode_metrics([e.episode for e in eps])  # tasks keyed by id: one entry
    assert (m["episodes"], m["valid"], m["successes"]) == (4, 3, 2)
    assert m["success_rate"] == pytest.approx(2 / 3)
    assert m["env_errors"] == 1 and m["env_error_rate"] == 0.25
    assert m["cost_per_success"] == pytest.approx(8.0 / 2)
    assert m["recovery_rate"] == pytest.approx(0.5) and m["fault_episodes"] == 2
    assert m["violation_rate"] == pytest.approx(1 / 3)
    # task a has one valid trial: it counts for k=1 only
    assert m["pass_k_tasks"] == {"1": 2, "2": 1}
    assert m["pass_at_k"]["2"] == 1.0 and m["pass_hat_k"]["2"] == 0.0
    lo, hi = m["success_ci"]
    assert 0.0 < lo < 2 / 3 < hi < 1.0


# -- suites -------------------------------------------------------------------------------


def test_shipped_suites_cover_every_family() -> None:
    from agentgym_envs.registration import ENVS

    assert {"smoke", "standard", "ood"} <= set(available_suites())
    families = {e.name: e.family for e in ENVS}
    for name in ("smoke", "standard", "ood"):
        suite = load_suite(name)
        covered = {families[e.env] for e in suite.entries}
        assert covered == {"games", "business", "sandbox", "web"}, name
        for entry in suite.entries:
            assert len(set(entry.task_ids(suite.seed))) == entry.tasks


def test_suite_jobs_are_a_pure_function_of_the_spec() -> None:
    spec = {"name": "t", "trials": 3, "seed": 7, "entries": [{"env": "Sokoban", "tasks": 4}]}
    a, b = suite_from_spec(spec), suite_from_spec(json.loads(json.dumps(spec)))
    assert a.version == b.version
    assert a.entries[0].jobs(7, 3) == b.entries[0].jobs(7, 3)
    assert len(a.entries[0].jobs(7, 3)) == 12
    other = suite_from_spec({**spec, "seed": 8})
    assert other.version != a.version and other.entries[0].jobs(8, 3) != a.entries[0].jobs(7, 3)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"name": "t", "entries": [{"env": "Sokobn"}]}, "Sokoban"),
        ({"name": "t", "entries": [{"env": "Sokoban", "trails": 2}]}, "trials"),
        ({"name": "t", "entries": [{"env": "Sokoban", "tasks": 0}]}, "positive"),
        ({"name": "t", "entries": [{"env": "Sokoban", "split": "dev"}]}, "train, test or ood"),
        ({"name": "t", "entries": []}, "non-empty"),
        ({"name": "t", "entries": [{"env": "Sokoban"}, {"env": "Sokoban"}]}, "duplicate"),
    ],
)
def test_bad_suites_name_the_fix(spec: dict[str, object], match: str) -> None:
    with pytest.raises(Exception, match=match):
        suite_from_spec(spec)


def test_unknown_suite_suggests_a_shipped_one() -> None:
    with pytest.raises(ConfigError, match="smoke"):
        load_suite("smoek")


# -- running -------------------------------------------------------------------------------

SPEC = {
    "name": "mini",
    "trials": 2,
    "seed": 3,
    "entries": [
        {"name": "sokoban", "env": "Sokoban", "difficulty": "easy", "tasks": 3},
        {"name": "retail", "env": "Retail", "difficulty": "easy", "tasks": 2},
    ],
}


def test_oracle_and_random_on_a_suite_and_exact_replay() -> None:
    suite = suite_from_spec(SPEC)
    report = evaluate(suite, ["oracle", "random", "noop"], EvalConfig(batch=3))
    by = {(r["policy"], r["entry"]): r["metrics"] for r in report["results"]}
    assert by["oracle", "sokoban"]["success_rate"] == 1.0
    assert by["oracle", "retail"]["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    assert by["noop", "sokoban"]["success_rate"] == 0.0
    assert report["overall"]["oracle"]["episodes"] == 10
    assert len(report["episodes"]) == 30
    assert all(e["versions"]["task_set"] for e in report["episodes"])
    json.dumps(report)  # plain data
    # the replay (other batch size: results must not depend on batching) is identical
    again, diffs = replay(report, EvalConfig(batch=2))
    assert diffs == []
    assert [e["reward"] for e in again["episodes"]] == [e["reward"] for e in report["episodes"]]
    # ... and so is one entry at a time (max_slots = batch) instead of side by side
    one_by_one, diffs = replay(report, EvalConfig(batch=2, max_slots=2))
    assert diffs == [] and one_by_one["config"]["max_slots"] == 2
    assert report["config"]["max_slots"] == 16
    del report["config"]["max_slots"]  # a report from before entries played side by side
    older, diffs = replay(report)
    assert diffs == [] and older["config"]["max_slots"] == older["config"]["batch"] == 3


def test_a_policy_or_entry_named_twice_plays_once() -> None:
    suite = suite_from_spec(SPEC)
    once = evaluate(suite, ["oracle"], EvalConfig(batch=2), entries=["retail"])
    twice = evaluate(suite, ["oracle", "oracle"], EvalConfig(batch=2), entries=["retail"] * 2)
    assert len(twice["episodes"]) == len(once["episodes"]) > 0
    assert [p["id"] for p in twice["policies"]] == ["oracle"]


def test_max_slots_below_batch_caps_the_slots_of_an_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentgym_envs.eval import evaluate as ev

    opened: list[int] = []
    make = ev.make_slots

    def spy(factory: object, count: int, *args: object, **kwargs: object) -> object:
        opened.append(count)
        return make(factory, count, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ev, "make_slots", spy)
    evaluate(suite_from_spec(SPEC), ["oracle"], EvalConfig(batch=3, max_slots=1))
    assert opened and set(opened) == {1}


def test_a_replay_of_a_report_from_before_trim_to_cuts_histories_as_it_did() -> None:
    from agentgym_envs.eval.replay import replay_options

    hf = {"id": "hf:smollm2", "spec": {"kind": "hf"}}
    old = {"config": {"policy_options": {"max_new_tokens": 8}}, "policies": [hf, {"id": "oracle"}]}
    assert replay_options(old) == {"max_new_tokens": 8, "trim_to": 1.0}
    new = {**old, "policies": [{"id": "hf:smollm2", "spec": {"kind": "hf", "trim_to": 0.5}}]}
    assert replay_options(new) == {"max_new_tokens": 8}  # the policy's own default again


def test_a_bad_max_slots_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"max_slots must be >= 1.*--max-slots 1"):
        EvalConfig(max_slots=0)
    out = tmp_path / "run"
    assert main(["eval", "--suite", "smoke", "--policy", "oracle", "--max-slots", "0",
                 "--out", str(out)]) == 2  # fmt: skip
    assert not out.exists()  # refused before the run folder was made


def test_replay_reports_a_difference() -> None:
    report = evaluate(suite_from_spec(SPEC), ["oracle"], EvalConfig(batch=2), entries=["retail"])
    report["episodes"][0]["steps"] += 1
    _, diffs = replay(report)
    assert len(diffs) == 1 and "steps" in diffs[0]


@pytest.mark.parametrize("isolation", ["inline", "process"])
def test_a_crashing_env_costs_only_its_episodes(isolation: str) -> None:
    spec = {
        "name": "crash",
        "trials": 2,
        "entries": [{"name": "c", "env": crashy.SUITE_ENV, "tasks": 3}],
    }
    suite = suite_from_spec(spec)
    doomed = suite.entries[0].task_ids(0)[0]
    kw = {"crash": "exit" if isolation == "process" else "raise", "crash_tasks": [doomed]}
    spec["entries"][0]["env_kwargs"] = kw  # type: ignore[index]
    suite = suite_from_spec(spec)
    report = evaluate(suite, ["oracle"], EvalConfig(batch=2, isolation=isolation))
    eps = report["episodes"]
    assert len(eps) == 6
    broken = [e for e in eps if e["task_id"] == doomed]
    assert all(e["outcome"] == "env_error" and not e["valid"] and e["error"] for e in broken)
    assert all(e["success"] for e in eps if e["task_id"] != doomed)
    m = report["overall"]["oracle"]
    assert m["success_rate"] == 1.0 and m["env_errors"] == 2 and m["valid"] == 4


@pytest.mark.parametrize("store", [False, True])
def test_an_info_the_record_cannot_read_costs_only_its_episodes(
    store: bool, tmp_path: Path
) -> None:
    """A plugin env's own ``info["user_llm"]`` (not the LLM user's report): its episodes
    are env errors with the reason, with or without a store, and the suite goes on."""
    spec = {"name": "odd", "entries": [{"name": "c", "env": crashy.SUITE_ENV, "tasks": 3}]}
    doomed = suite_from_spec(spec).entries[0].task_ids(0)[0]
    spec["entries"][0]["env_kwargs"] = {"crash": "foreign_info", "crash_tasks": [doomed]}  # type: ignore[index]
    config = EvalConfig(batch=2, store=str(tmp_path / "t.db") if store else None)
    report = evaluate(suite_from_spec(spec), ["oracle"], config)
    by_task = {e["task_id"]: e for e in report["episodes"]}
    assert by_task[doomed]["outcome"] == "env_error" and "user_llm" in by_task[doomed]["error"]
    assert sum(e["success"] for e in report["episodes"]) == 2


def test_eval_cli_writes_reports_and_replays(tmp_path: Path) -> None:
    suite_file = tmp_path / "mini.yaml"
    suite_file.write_text(json.dumps(SPEC))  # JSON is YAML
    out = tmp_path / "run"
    code = main(["eval", "--suite", str(suite_file), "--policy", "oracle", "random",
                 "--entries", "retail", "--out", str(out), "--trials", "1"])  # fmt: skip
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["suite"]["spec"]["trials"] == 1 and len(report["episodes"]) == 4
    assert (out / "report.html").stat().st_size > 1000 and (out / "report.md").exists()
    from agentgym_envs.store import TrajectoryStore

    with TrajectoryStore(out / "trajectories.sqlite") as store:
        assert store.count() == 4
        assert store.count(policy="oracle", success=True) == 2
    assert main(["eval", "--replay", str(out / "report.json"), "--out", str(tmp_path / "r")]) == 0


# -- policy input is never an env error (issue 26) ---------------------------------------

_TRANSFER = '{"name": "transfer_to_human_agents", "arguments": {"summary": "One moment %s"}}'
_NATIVE = json.dumps(
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "%s",
                "type": "function",
                "function": {
                    "name": "transfer_to_human_agents",
                    "arguments": json.dumps({"summary": "One moment"}),
                },
            }
        ],
    }
)


class _Fixed:
    """A policy that sends one fixed action every turn."""

    name = "fixed"

    def __init__(self, action: str) -> None:
        self.action = action

    def reset(self, indices: object) -> None:
        pass

    def act(self, observations: list[str], infos: object, slots: object = None) -> list[str]:
        return [self.action] * len(observations)


def _played(action: str, store: Path, run_id: str, **env_kwargs: object) -> EpisodeResult:
    """One Retail episode of ``action`` through the evaluator's default path (inline
    slots, the recorder writing into ``store``)."""
    from agentgym_envs.eval.evaluate import _close_stores, run_entry
    from agentgym_envs.eval.runner import _Built
    from agentgym_envs.eval.suite import Job, SuiteEntry

    entry = SuiteEntry("retail", "Retail", difficulty=("easy",), env_kwargs=env_kwargs)
    task = entry.task_ids(0)[0]
    try:
        (result,) = run_entry(
            entry,
            [Job("retail", task, 0, 7)],
            "",
            _Built(lambda envs: _Fixed(action)),
            EvalConfig(batch=1, store=str(store), run_id=run_id),
        )
    finally:
        _close_stores()
    return result


@pytest.mark.parametrize(
    ("hostile", "clean", "env_kwargs"),
    [
        (_TRANSFER % "\\ud800", _TRANSFER % "?", {}),
        (_TRANSFER % "\ud800", _TRANSFER % "?", {}),
        (_NATIVE % "\\ud800", _NATIVE % "call_1", {"tool_mode": "native"}),
        (_NATIVE % "<|im_end|>\\n", _NATIVE % "call_1", {"tool_mode": "native"}),
    ],
    ids=["json-escape", "raw-str", "native-id", "native-template-id"],
)
def test_a_surrogate_from_the_policy_is_its_failure_not_an_env_error(
    tmp_path: Path, hostile: str, clean: str, env_kwargs: dict[str, object]
) -> None:
    """A wrong answer holding a lone surrogate is the policy's failure, as it is without
    one: the recorder's store write raised on it, so the evaluator counted an invalid
    ``env_error`` that left every success denominator."""
    from agentgym_envs.store import TrajectoryStore

    store = tmp_path / "t.sqlite"
    bad = _played(hostile, store, "hostile", **env_kwargs)
    good = _played(clean, store, "clean", **env_kwargs)
    assert bad.episode.outcome is Outcome.FAILURE and bad.episode.valid, bad.episode.error
    for name in ("outcome", "valid", "steps", "reward", "milestones", "tool_calls"):
        assert getattr(bad.episode, name) == getattr(good.episode, name), name
    with TrajectoryStore(store) as opened:
        assert opened.count(run_id="hostile", outcome="failure", valid=True) == 1
        ((_, stored),) = opened.query(run_id="hostile")
    said = [m for msg in stored.messages for m in msg.get("native_messages", ())]
    assert all(re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", m.get("tool_call_id", "x")) for m in said)
    report = result_metrics([bad])
    assert report["env_errors"] == 0 and report["valid"] == 1


def test_a_journal_from_before_side_by_side_entries_sums_their_times(tmp_path: Path) -> None:
    from agentgym_envs.eval.journal import EpisodeJournal

    path = tmp_path / "episodes.jsonl"
    journal = EpisodeJournal(path)
    first, second = _ep("a", 0, "success"), _ep("b", 0, "failure")
    journal.add(first, 100.0)
    journal.add(EpisodeResult("p", "f", first.env_id, "b", 0, 1, second.episode), 200.0)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["policy_wall_s"] for r in rows] == [100.0, 200.0]  # written today
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "policy_wall_s"})
                            + "\n" for r in rows))  # fmt: skip
    old = EpisodeJournal.load(path)  # entries that ran one after another: 100 s + 200 s
    assert old.policy_wall_s("p") == 300.0 and old.wall_s("p", "e") == 100.0


def test_given_jobs_that_share_a_trial_and_seed_keep_both_episodes(tmp_path: Path) -> None:
    from agentgym_envs.eval.journal import EpisodeJournal
    from agentgym_envs.eval.suite import Job

    suite = suite_from_spec(SPEC)
    tasks = suite.entries[0].task_ids(suite.seed)[:2]
    jobs = [Job("sokoban", task, 0, 5) for task in tasks]  # same trial, same seed
    path = tmp_path / "episodes.jsonl"
    report = evaluate(
        suite,
        ["oracle"],
        EvalConfig(batch=2),
        entries=["sokoban"],
        jobs={("oracle", "sokoban"): jobs},
        journal=EpisodeJournal(path),
    )
    assert sorted(e["task_id"] for e in report["episodes"]) == sorted(tasks)
    resumed = EpisodeJournal.load(path)  # a resumed run finds both, and plays neither again
    assert [r.task_id for r in resumed.results("oracle", jobs)] == tasks
    drawn = Job("sokoban", "", 0, 5)
    assert not resumed.has("oracle", drawn)  # nor does a job that draws its task match


def test_a_journal_from_before_drawn_jobs_were_marked_resumes_every_job(tmp_path: Path) -> None:
    from agentgym_envs.eval.journal import EpisodeJournal
    from agentgym_envs.eval.suite import Job

    path = tmp_path / "episodes.jsonl"
    journal = EpisodeJournal(path)
    journal.add(_ep("lake-3", 0, "success"), 1.0)  # played as a job that drew lake-3
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "drawn"}) + "\n" for r in rows)
    )
    old = EpisodeJournal.load(path)
    drawn, named = Job("e", "", 0, 0), Job("e", "lake-3", 0, 0)
    assert old.has("p", drawn) and old.has("p", named)  # either way, not played again
    assert len(old) == 1 and [r.task_id for r in old.results("p", [drawn])] == ["lake-3"]
