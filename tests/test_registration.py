"""Registration, gym.make / make_vec, the import cost and the env table."""

import subprocess
import sys

import gymnasium as gym
import pytest

import agentgym_envs
from agentgym_envs.core import ConfigError, EnvNotFoundError
from agentgym_envs.registration import ENVS, find


def test_every_entry_is_registered_and_versions_match_the_class() -> None:
    from gymnasium.envs.registration import load_env_creator

    for entry in ENVS:
        assert entry.id in gym.registry
        cls = load_env_creator(entry.entry_point)
        assert cls.version == entry.version, f"bump {entry.id}: class version {cls.version}"
        assert cls.__doc__ and all(
            section in cls.__doc__
            for section in (
                "Description:",
                "Observation:",
                "Tools:",
                "Milestones:",
                "Safety gates:",
                "Rewards:",
                "Termination:",
            )
        ), f"{cls.__name__} docstring lacks a manual section"


def test_make_with_module_prefix_needs_no_prior_import() -> None:
    code = (
        "import gymnasium as gym\n"
        "env = gym.make('agentgym_envs:agentgym/Sokoban-v0')\n"
        "obs, info = env.reset(seed=0)\n"
        "print(info['task']['id'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("sokoban-")


def test_import_is_light() -> None:
    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "import agentgym_envs\n"
        "print(time.perf_counter() - t)\n"
        "heavy = [m for m in ('torch', 'transformers', 'playwright', 'ray', 'docker') "
        "if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.split("\n")
    assert lines[1] == "[]", f"import agentgym_envs pulled in heavy modules: {lines[1]}"
    # not a timing assertion: the import must simply not load any env family module
    code = (
        "import sys, agentgym_envs\n"
        "print(sorted(m for m in sys.modules if '.games' in m or '.business' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_env_suggests_the_closest() -> None:
    with pytest.raises(EnvNotFoundError, match="Did you mean 'agentgym/Sokoban-v0'"):
        find("agentgym/Sokobon-v0")
    assert find("Sokoban").id == "agentgym/Sokoban-v0"
    assert agentgym_envs.__version__


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec(mode) -> None:
    envs = gym.make_vec("agentgym/Sokoban-v0", num_envs=2, vectorization_mode=mode)
    try:
        obs, infos = envs.reset(seed=[3, 4])
        single = gym.make("agentgym/Sokoban-v0")
        assert tuple(obs) == (single.reset(seed=3)[0], single.reset(seed=4)[0])
        for _ in range(3):
            obs, _, _, _, infos = envs.step(('move(direction="up")', "bad"))
        assert all(isinstance(o, str) and len(o) > 10 for o in obs)
        assert infos["error"]["code"][1] == "parse_error" and not infos["error"]["_code"][0]
        # observations change as the episode goes on (shared memory is not stale)
        assert "Boxes on targets" in obs[0]
    finally:
        envs.close()


def test_async_shared_memory_observations_are_live() -> None:
    envs = gym.make_vec("agentgym/Sokoban-v0", num_envs=2, vectorization_mode="async")
    single = gym.make("agentgym/Sokoban-v0")
    try:
        obs, _ = envs.reset(seed=[0, 1])
        single.reset(seed=0)
        for action in ('move(direction="up")', 'move(direction="left")', "nonsense"):
            obs, *_ = envs.step((action, action))
            expected = single.step(action)[0]
            assert obs[0] == expected
    finally:
        envs.close()


def test_a_failed_first_reset_does_not_poison_the_env() -> None:
    # Gymnasium's passive checker used to keep no reset data after a first reset
    # raised, so every later step raised "cannot unpack non-iterable NoneType object"
    env = gym.make("agentgym/FrozenLake-v0")
    try:
        with pytest.raises(ConfigError, match="Did you mean 'task_id'"):
            env.reset(seed=0, options={"task_idd": "x"})  # a typo
        env.reset(seed=0)
        obs, _, _, _, info = env.step('move(direction="up")')
        assert isinstance(obs, str) and not info["error"]
        assert str(env).startswith("<ResetRecovery<OrderEnforcing<PassiveEnvChecker<")
        again = gym.make(env.spec)  # the spec rebuilds the same stack
        assert str(again) == str(env)
        again.close()
    finally:
        env.close()
    bare = gym.make("agentgym/FrozenLake-v0", disable_env_checker=True)
    with pytest.raises(ConfigError):
        bare.reset(options={"split": "nope"})
    bare.reset(seed=1)
    assert isinstance(bare.step('move(direction="up")')[0], str)
    bare.close()


def test_a_bad_make_kwarg_names_the_class_and_the_closest_kwarg() -> None:
    with pytest.raises(ConfigError) as err:
        gym.make("agentgym/FrozenLake-v0", max_stepz=3)
    message = str(err.value)
    assert message.startswith("FrozenLakeEnv got an unknown keyword argument 'max_stepz'")
    assert "Did you mean 'max_steps'?" in message
    # the family's own kwargs and the base class's are listed
    assert "is_slippery" in message and "reward_config" in message and "AgentEnv" not in message
    with pytest.raises(ConfigError, match=r"SokobanEnv .*'end_on_deadlok'.*'end_on_deadlock'"):
        gym.make("agentgym/Sokoban-v0", end_on_deadlok=False)
    assert gym.make("agentgym/Sokoban-v0", end_on_deadlock=False, max_steps=5) is not None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_same_step_autoreset_as_the_readme_shows(mode) -> None:
    same_step = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    envs = gym.make_vec(
        "agentgym/FrozenLake-v0", num_envs=2, vectorization_mode=mode, vector_kwargs=same_step
    )
    try:
        envs.reset(seed=[0, 1])
        for direction in ("up", "left", "down", "right") * 10:
            obs, _, terminated, truncated, infos = envs.step((f"move({direction})",) * 2)
            done = terminated | truncated
            if done.any():
                break
        assert done.any(), "no episode ended"
        i = int(done.argmax())
        # the ending step already returns the next episode's first observation
        assert infos["_final_obs"][i] and infos["final_info"]["outcome"][i] != "continue"
        assert infos["step"][i] == 0 and infos["final_info"]["step"][i] >= 1
        assert "Episode" in infos["final_obs"][i] and "Episode" not in obs[i]
    finally:
        envs.close()
