"""WebShop's step checks in the real Chromium: ``cart_match`` pays for a cart closer to
the buy goal, once, read from the shop's database (never page text), and
``no_irreversible_error`` charges a change the task does not allow."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401 - registers the envs
from agentgym_envs.core import Outcome, RewardConfig, Task
from agentgym_envs.core.step_checks import step_reward_bounds
from agentgym_envs.web import webshop_tasks as tasks
from agentgym_envs.web.webshop import WebShopEnv
from tests.web.support import needs_browser

pytestmark = [pytest.mark.browser, needs_browser, pytest.mark.timeout(300)]


def _largest_weight(env: WebShopEnv) -> float:
    """Just below the largest λ that reset accepts for this env and task."""
    bounds = [s.episode_bounds(env.step_budget) for s in env.step_check_specs()]
    gain, loss = sum(g for g, _ in bounds), sum(lo for _, lo in bounds)
    return RewardConfig().max_local_weight(gain, loss) * 0.999


def _make(config: RewardConfig) -> tuple[gym.Env, WebShopEnv]:
    made = gym.make("agentgym/WebShop-v2", reward_config=config, prewarm=False)
    inner = made.unwrapped
    assert isinstance(inner, WebShopEnv)
    return made, inner


def _task(env: WebShopEnv, template: str, difficulty: str = "easy") -> Task:
    return next(
        t
        for t in env.task_set.pool("test")
        if t.spec["template"] == template and t.difficulty == difficulty
    )


def _start(made: gym.Env, task: Task) -> None:
    made.unwrapped.split = task.split
    made.reset(seed=0, options={"task_id": task.id, "split": task.split})


def _other_option(task: Task) -> str:
    """An option of the goal's product in stock that differs in colour and size."""
    color, size = task.spec["option"].split(" / ")
    rows = tasks._world(task.spec["world"]).execute(
        "SELECT color, size FROM variants WHERE product_id = ? AND stock > 0 ORDER BY id",
        (task.spec["product"],),
    )
    return next(f"{c} / {s}" for c, s in rows if c != color and s != size)


def test_cart_match_pays_a_closer_cart_once_and_farming_it_never_beats_a_success() -> None:
    probe, inner = _make(RewardConfig(local_weight=1e-9))
    task = _task(inner, "buy")
    _start(probe, task)
    config = RewardConfig(local_weight=_largest_weight(inner))
    probe.close()
    made, env = _make(config)
    _start(made, task)
    low, high = step_reward_bounds(env)
    product = f'goto(path="/product/{task.spec["product"]}")'

    def add(option: str) -> list:
        return [
            product,
            lambda: f'select(bid={env.find("combobox", "Option")}, option="{option}")',
            lambda: f"click(bid={env.find('button', 'Add to cart')})",
        ]

    remove = [lambda: f"click(bid={env.find('button', 'Remove')})"]
    # the right product in another option (2 of 4: product, quantity 1), swapped for the
    # goal's option (4 of 4), then removed and added again (nothing more), then idling
    plan = [*add(_other_option(task)), *remove, *add(task.spec["option"]), *remove]
    plan += add(task.spec["option"])
    paid: list[float] = []
    ret = 0.0
    while True:
        step = plan.pop(0) if plan else "noop()"
        action = step() if callable(step) else step
        _, reward, terminated, truncated, info = made.step(action)
        assert not info.get("error"), (action, info.get("error"))
        assert low - 1e-9 <= reward <= high + 1e-9, (action, reward, (low, high))
        assert info["step_checks"]["no_irreversible_error"] == 0.0
        paid.append(info["step_checks"]["cart_match"])
        ret += reward
        if terminated or truncated:
            break
    made.close()
    assert [p for p in paid if p] == pytest.approx([0.5, 0.5])  # each bit of progress once
    assert info["outcome"] is Outcome.TIMEOUT  # it never ordered
    assert ret < config.success - config.max_penalty  # below the worst success


def test_page_text_and_form_input_do_not_move_cart_match() -> None:
    made, env = _make(RewardConfig(local_weight=0.01))
    task = _task(env, "buy", "medium")
    _start(made, task)
    goal = task.instruction.replace('"', "")
    actions = [
        f'goto(path="/search?q={goal[:120]}")',  # the goal echoed back by the page
        lambda: f'fill(bid={env.find("textbox", "Search")}, text="cart_match 1.0 {goal[:80]}")',
        'press(key="Enter")',
        f'goto(path="/product/{task.spec["product"]}")',  # viewing the product is no cart
        lambda: f'fill(bid={env.find("spinbutton", "Quantity")}, text="1")',
        'goto(path="/cart")',
    ]
    seen = ""
    for step in actions:
        action = step() if callable(step) else step
        *_, info = made.step(action)
        assert not info.get("error"), (action, info.get("error"))
        assert info["step_checks"]["cart_match"] == 0.0, action
        assert info["outcome"] is Outcome.CONTINUE
        seen += env.render_view()
    assert "cart_match 1.0" in seen  # the injected text was on the pages the policy saw
    made.close()


def test_a_change_the_task_does_not_allow_is_an_irreversible_error() -> None:
    made, env = _make(RewardConfig(local_weight=0.01))
    task = _task(env, "address")
    _start(made, task)
    assert "cart_match" not in [s.name for s in env.step_check_specs()]  # buy tasks only
    *_, info = made.step('goto(path="/product/1")')
    assert info["step_checks"]["no_irreversible_error"] == 0.0
    *_, info = made.step(f"click(bid={env.find('button', 'Add to cart')})")
    assert info["outcome"] is Outcome.FAILURE and "cart_items" in (env._reason or "")
    assert info["step_checks"]["no_irreversible_error"] == -1.0
    made.close()


@pytest.mark.slow
def test_an_order_that_does_not_match_the_task_is_an_irreversible_error() -> None:
    made, env = _make(RewardConfig(local_weight=0.01))
    task = _task(env, "buy")
    _start(made, task)
    steps = [
        f'goto(path="/product/{task.spec["product"]}")',
        lambda: f'select(bid={env.find("combobox", "Option")}, option="{_other_option(task)}")',
        lambda: f"click(bid={env.find('button', 'Add to cart')})",
        'goto(path="/checkout")',
        lambda: f"check(bid={env.find('radio', task.spec['payment_label'])})",
        lambda: f"click(bid={env.find('button', 'Place order')})",
    ]
    for step in steps:
        *_, info = made.step(step() if callable(step) else step)
    assert info["outcome"] is Outcome.FAILURE, env._reason
    assert info["step_checks"]["no_irreversible_error"] == -1.0
    made.close()
