"""Success by task difficulty and by project, per report row (``by_difficulty``,
``by_project``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym_envs.core.tasks import DIFFICULTIES, Task, TaskSet, load_task_set
from agentgym_envs.eval.journal import EpisodeResult
from agentgym_envs.eval.suite import SuiteEntry, env_class

logger = logging.getLogger(__name__)


def tasks_of(
    known: dict[str, Mapping[str, Task] | None], entry: SuiteEntry
) -> Mapping[str, Task] | None:
    if entry.name not in known:
        known[entry.name] = entry_tasks(entry)
    return known[entry.name]


def entry_tasks(entry: SuiteEntry) -> Mapping[str, Task] | None:
    """The tasks an entry's env draws from, by id: the task set its ``env_kwargs`` pass
    as ``tasks``, else the env class's task file (the one :meth:`SuiteEntry.task_ids`
    loads, cached per process); None where there is none to load (an env outside
    agentgym, a missing file), so a report never fails for want of a task set."""
    given = entry.env_kwargs.get("tasks")
    if isinstance(given, TaskSet):
        return {t.id: t for t in given.tasks}
    if isinstance(given, Sequence) and given and all(isinstance(t, Task) for t in given):
        return {t.id: t for t in given}
    try:
        cls = env_class(entry.env)
        task_dir = getattr(cls, "task_dir", None)
        task_set = (
            load_task_set(cls.task_file, task_dir) if task_dir else load_task_set(cls.task_file)
        )
    except Exception as exc:  # a report without a breakdown beats no report
        logger.debug("no task set for entry %r (%s); no breakdowns", entry.name, exc)
        return None
    return {t.id: t for t in task_set.tasks}


def _tally(groups: Mapping[str, list[EpisodeResult]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, eps in groups.items():
        valid = [e for e in eps if e.episode.valid]
        wins = sum(e.success for e in valid)
        out[key] = {
            "episodes": len(valid),
            "successes": wins,
            "success": wins / len(valid) if valid else None,
        }
    return out


def breakdowns(
    results: Sequence[EpisodeResult], tasks: Mapping[str, Task] | None
) -> dict[str, Any]:
    """A report row's success by task difficulty (``by_difficulty``) and, where some of
    its tasks name one in ``spec["project"]``, by project (``by_project``): per level or
    project the valid episodes, their successes and the success rate (None without a
    valid episode). Episodes whose task ``tasks`` does not hold are left out; without
    ``tasks`` (or a task it holds) there is no breakdown, and the row has neither key."""
    if not tasks:
        return {}
    levels: dict[str, list[EpisodeResult]] = {}
    projects: dict[str, list[EpisodeResult]] = {}
    for r in results:
        task = tasks.get(r.task_id)
        if task is None:
            continue
        levels.setdefault(str(task.difficulty), []).append(r)
        project = task.spec.get("project") if isinstance(task.spec, Mapping) else None
        if project:
            projects.setdefault(str(project), []).append(r)
    if not levels:
        return {}
    order = [d for d in DIFFICULTIES if d in levels] + [d for d in levels if d not in DIFFICULTIES]
    out: dict[str, Any] = {"by_difficulty": _tally({d: levels[d] for d in order})}
    if projects:
        out["by_project"] = _tally({p: projects[p] for p in sorted(projects)})
    return out
