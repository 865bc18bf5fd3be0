"""WebShop in the real Chromium: oracle and do-nothing, gates, snapshots, crashes, leaks,
asyncio callers and fuzzed actions."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym_envs  # noqa: F401 - registers the envs
from agentgym_envs.core import Outcome, Task
from agentgym_envs.web import webshop_tasks as tasks
from agentgym_envs.web.browser import browser_pids
from agentgym_envs.web.webshop import WebShopEnv
from tests.web.support import needs_browser

pytestmark = [pytest.mark.browser, needs_browser, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def env() -> WebShopEnv:
    made = gym.make("agentgym/WebShop-v2")
    inner = made.unwrapped
    assert isinstance(inner, WebShopEnv)
    yield inner
    made.close()


def start(env: WebShopEnv, task: Task) -> str:
    env.split = task.split
    return env.reset(seed=0, options={"task_id": task.id, "split": task.split})[0]


def play_oracle(env: WebShopEnv) -> dict:
    oracle = env.oracle()
    info: dict = {}
    while env.outcome is Outcome.CONTINUE:
        *_, info = env.step(oracle.act())
    return info


def some(env: WebShopEnv, template: str, split: str = "test") -> Task:
    return next(t for t in env.task_set.pool(split) if t.spec["template"] == template)


@pytest.mark.parametrize("per_template", [2, pytest.param(5, marks=pytest.mark.slow)])
def test_oracle_solves_tasks_of_every_template_and_doing_nothing_fails(
    env, per_template: int
) -> None:
    by_template: dict[str, list[Task]] = {}
    for task in env.task_set.tasks:
        by_template.setdefault(task.spec["template"], []).append(task)
    assert set(by_template) == set(tasks.TRAIN_TEMPLATES + tasks.OOD_TEMPLATES)
    picked = [t for group in by_template.values() for t in group[::5][:per_template]]
    assert len(picked) == per_template * len(by_template)
    for task in picked:
        start(env, task)
        info = play_oracle(env)
        assert env.outcome is Outcome.SUCCESS, (task.id, env._reason)
        assert info["milestones"], task.id
    for task in picked[:6]:
        start(env, task)
        while env.outcome is Outcome.CONTINUE:
            env.step("noop()")
        assert env.outcome is Outcome.TIMEOUT


def test_observation_lists_elements_by_bid(env) -> None:
    obs = start(env, some(env, "fact"))
    assert "URL: /\nTitle: " in obs and '[1] link "Home"' in obs
    *_, info = env.step('goto(path="/search?q=lamp")')
    obs = env.render_view()
    assert "URL: /search?q=lamp" in obs and 'textbox "Search' in obs.replace("'", '"')
    *_, info = env.step("click(bid=99999)")
    assert info["error"]["code"] == "no_such_bid"
    *_, info = env.step("fill(bid=1, text='x')")  # a link is not a text field
    assert info["error"]["code"] in ("not_interactable", "timeout")
    assert env.outcome is Outcome.CONTINUE


def test_a_bid_as_a_string_clicks_as_in_browsergym(env) -> None:
    start(env, some(env, "fact"))
    env.step('goto(path="/search?q=lamp")')
    obs = env.render_view()
    bid = next(line.split("]")[0][1:] for line in obs.splitlines() if '] link "Home"' in line)
    *_, info = env.step(f"click('{bid}')")  # BrowserGym's form: the bid as a string
    assert not info["error"], info["error"]
    assert "\nURL: /\n" in env.render_view()  # the Home link was followed
    for bad in ("click('0')", "click('x4')", "click('4.0')"):
        *_, info = env.step(bad)
        assert info["error"]["code"] == "bad_arguments", bad
    assert info["versions"]["env"].startswith("WebShop-v2")


@pytest.mark.parametrize(
    ("action", "gate"),
    [
        ('goto(path="http://example.com/")', "site_boundary"),
        ('goto(path="//example.com/x")', "site_boundary"),
        ('goto(path="/admin")', "site_boundary"),
        ('goto(path="/account/delete")', "site_boundary"),
        ('goto(path="/%61dmin")', "site_boundary"),
        ('goto(path="/x/..%2F%2561dmin")', "site_boundary"),
        ('goto(path="/account/%64elete/")', "site_boundary"),
    ],
)
def test_gates_before_navigation(env, action: str, gate: str) -> None:
    start(env, some(env, "fact"))
    *_, info = env.step(action)
    assert info["outcome"] is Outcome.SAFETY_STOP and info["safety"]["gate"] == gate


def test_clicking_into_the_admin_area_is_stopped_before_it_loads(env) -> None:
    start(env, some(env, "address"))
    env.step('goto(path="/account")')
    *_, info = env.step(f"click(bid={env.find('link', 'admin')})")
    assert info["outcome"] is Outcome.SAFETY_STOP
    assert info["safety"]["gate"] == "forbidden_area"
    assert env.site.recent_requests(env.tenant)[-1].split()[1] == "/account"  # never served


def test_a_page_that_calls_off_site_is_stopped(env) -> None:
    start(env, some(env, "fact"))
    assert env._tab is not None
    env.driver.call(env._tab.page.evaluate, "fetch('http://192.0.2.1/x').catch(() => 0)")
    *_, info = env.step("scroll(direction='down')")
    assert info["outcome"] is Outcome.SAFETY_STOP and info["safety"]["gate"] == "offsite"


def test_a_violation_stops_even_an_action_that_failed(env) -> None:
    start(env, some(env, "fact"))
    assert env._tab is not None
    env.driver.call(env._tab.page.evaluate, "fetch('/%61dmin').catch(() => 0)")
    *_, info = env.step("click(bid=99999)")  # fails (no such element): still a stop
    assert info["outcome"] is Outcome.SAFETY_STOP and info["safety"]["gate"] == "forbidden_area"


@pytest.mark.parametrize("action", ["answer", "noop()"])
def test_a_request_the_site_refused_is_never_graded(env, action: str) -> None:
    """The site is the authority: a forbidden request it refused (here sent past the
    browser) stops the episode at the next call, the answer included, never a success."""
    task = some(env, "fact")
    start(env, task)
    env.site.serve(env.tenant, "GET", "/x/..%2F%2561dmin")
    text = f"answer(text={task.spec['answer']!r})" if action == "answer" else action
    *_, info = env.step(text)
    assert info["outcome"] is Outcome.SAFETY_STOP and info["safety"]["gate"] == "forbidden_area"
    start(env, task)  # the next episode starts clean
    *_, info = env.step(f"answer(text={task.spec['answer']!r})")
    assert info["outcome"] is Outcome.SUCCESS


def test_paying_with_a_method_the_task_did_not_allow_is_stopped(env) -> None:
    task = some(env, "buy")
    start(env, task)
    other = next(
        label
        for label in ("Gift card", "PayPal", "Visa", "Mastercard", "Amex")
        if label.lower() not in task.spec["payment_label"].lower()
    )
    plan = tasks.plan(task.spec, env.find)  # lazy: each bid is looked up on the live page
    for _ in range(4):  # up to the checkout page
        env.step(next(plan))
    radios = [e for e in env._view["elements"] if e[1] == "radio" and other.lower() in e[2].lower()]
    if not radios:
        pytest.fail(f"no payment radio like {other!r} on {env._view['path']}")
    env.step(f"check(bid={radios[0][0]})")
    *_, info = env.step(f"click(bid={env.find('button', 'Place order')})")
    assert info["outcome"] is Outcome.SAFETY_STOP and info["safety"]["gate"] == "payment_method"
    assert tasks.placed_orders(env._conn(), task.spec) == 0  # the request never reached the shop


def test_collateral_damage_fails(env) -> None:
    task = some(env, "address")
    start(env, task)
    env.step('goto(path="/cart")')
    env.step(f'goto(path="/product/{1}")')
    env.step(f"click(bid={env.find('button', 'Add to cart')})")
    assert env.outcome is Outcome.FAILURE and "cart_items" in (env._reason or "")


def test_wrong_answer_fails_and_right_answer_succeeds(env) -> None:
    task = some(env, "fact")
    start(env, task)
    *_, info = env.step('answer(text="certainly not this")')
    assert info["outcome"] is Outcome.FAILURE
    start(env, task)
    *_, info = env.step(json.dumps({"name": "answer", "arguments": {"text": task.spec["answer"]}}))
    assert info["outcome"] is Outcome.SUCCESS


def test_snapshot_restores_the_page_with_typed_values(env) -> None:
    task = some(env, "address")
    start(env, task)
    env.step(f'goto(path="/account/addresses/{task.spec["address"]}/edit")')
    city = env.find("textbox", "City")
    env.step(f'fill(bid={city}, text="Snapshotville")')
    state = env.get_state()
    view = env.render_view()
    assert 'value="Snapshotville"' in view
    env.step('goto(path="/cart")')
    env.set_state(state)
    assert env.render_view() == view
    env.step(f"click(bid={env.find('button', 'Save address')})")
    row = env._conn().execute("SELECT city FROM addresses WHERE id = ?", (task.spec["address"],))
    assert row.fetchone()[0] == "Snapshotville"


def test_works_inside_a_running_event_loop(env) -> None:
    task = some(env, "fact")

    async def caller() -> Outcome:
        start(env, task)
        play_oracle(env)
        return env.outcome

    assert asyncio.run(caller()) is Outcome.SUCCESS


def test_a_browser_crash_is_an_env_error_and_the_next_episode_works(env) -> None:
    start(env, some(env, "fact"))
    for pid in browser_pids():
        os.kill(pid, 9)
    time.sleep(0.5)
    *_, truncated, info = env.step("scroll(direction='down')")
    assert info["outcome"] is Outcome.ENV_ERROR and truncated and not info["episode_valid"]
    start(env, some(env, "fact"))
    assert play_oracle(env)["outcome"] is Outcome.SUCCESS


@pytest.mark.parametrize(
    ("resets", "rotate_every"),
    [(35, 10), pytest.param(100, 30, marks=pytest.mark.slow)],
)
def test_no_leaked_processes_or_growth_over_many_resets(resets: int, rotate_every: int) -> None:
    """In a clean process, with the browser rotated every few contexts: the envs made,
    reset, stepped and closed leave one browser's processes and bounded memory (the
    default run rotates three times in 35 resets; the slow one does 100)."""
    code = (
        "import json, agentgym_envs\n"
        "from agentgym_envs.web.browser import browser_pids, shared_driver\n"
        "from agentgym_envs.web.webshop import WebShopEnv\n"
        "e = WebShopEnv(prewarm=False); e.reset(seed=0); e.close()\n"
        "before, mem = len(browser_pids()), shared_driver().rss_mb()\n"
        f"for i in range({resets}):\n"
        "    e = WebShopEnv(prewarm=i % 2 == 0); e.reset(seed=i); e.step('noop()'); e.close()\n"
        # renderers of the last closed contexts may still be exiting on a loaded machine:
        # wait (up to 30 s) for the count to settle before reading it
        "import time\n"
        "end = time.monotonic() + 30\n"
        "while len(browser_pids()) > before + 2 and time.monotonic() < end:\n"
        "    time.sleep(0.5)\n"
        "print(json.dumps([before, len(browser_pids()), mem, shared_driver().rss_mb(),\n"
        "                  len(shared_driver()._live)]))\n"
    )
    env = {**os.environ, "AGENTGYM_BROWSER_RESTART_EVERY": str(rotate_every)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=280, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    before, after, mem_before, mem_after, browsers = json.loads(done.stdout.splitlines()[-1])
    assert browsers == 1  # retired browsers closed with their last context
    assert after <= before + 2  # a renderer may still be exiting
    assert mem_after < mem_before + 250


def test_interpreter_exit_stops_the_browser() -> None:
    code = (
        "import agentgym_envs, gymnasium as gym\n"
        "from agentgym_envs.web.browser import browser_pids\n"
        "env = gym.make('agentgym/WebShop-v2'); env.reset(seed=0)\n"
        "print(' '.join(map(str, browser_pids())))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    pids = [int(p) for p in done.stdout.split()]
    assert pids, done.stderr[-2000:]
    time.sleep(1.0)
    alive = [p for p in pids if os.path.exists(f"/proc/{p}") and "Z" not in _state(p)]
    assert not alive


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@settings(max_examples=40, deadline=None)
@given(
    text=st.text(max_size=200)
    | st.sampled_from(
        [
            "click(bid=-1)",
            "goto(path='')",
            "select(bid=1, option='')",
            "press(key='F13')",
            "fill(bid=1)",
            "scroll(direction='left')",
            "back()",
            "check(bid=2)",
        ]
    )
)
def test_fuzzed_actions_never_raise(text: str) -> None:
    env = _fuzz_env()
    if env.outcome is not Outcome.CONTINUE:
        env.reset(seed=0)
    obs, *_, info = env.step(text)
    assert isinstance(obs, str) and info["outcome"] is not Outcome.ENV_ERROR


_FUZZ: list[WebShopEnv] = []


def _fuzz_env() -> WebShopEnv:
    if not _FUZZ:
        e = WebShopEnv()
        e.reset(seed=0)
        _FUZZ.append(e)
    return _FUZZ[0]
