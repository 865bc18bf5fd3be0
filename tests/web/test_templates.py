"""WebShop's task templates are an Enum; task specs keep the plain value (data)."""

from __future__ import annotations

import json

import pytest

from agentgym_envs.core import ConfigError
from agentgym_envs.core.tasks import load_task_set
from agentgym_envs.web import webshop_tasks as tasks
from agentgym_envs.web.webshop_tasks import Template, template_of


def test_every_stored_task_names_a_template() -> None:
    found = {template_of(t.spec) for t in load_task_set("web/webshop.jsonl").tasks}
    assert found == set(Template)
    assert set(tasks.TRAIN_TEMPLATES).isdisjoint(tasks.OOD_TEMPLATES)
    assert set(tasks.TRAIN_TEMPLATES) | set(tasks.OOD_TEMPLATES) == set(Template)


def test_generated_specs_hold_the_plain_value() -> None:
    task = next(t for t in (tasks.generate(s, "easy", "ood") for s in range(20)) if t)
    raw = task.spec["template"]
    assert type(raw) is str and template_of(task.spec) in tasks.OOD_TEMPLATES
    assert json.loads(json.dumps(task.spec))["template"] == raw
    assert task.id.startswith(f"webshop-{raw}-easy-ood-")


def test_an_unknown_template_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="expected one of"):
        template_of({"template": "refund"})
    with pytest.raises(ConfigError):
        template_of({})
