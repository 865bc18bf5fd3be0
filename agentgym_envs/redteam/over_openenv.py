"""Play an attack through the OpenEnv server, the way most users reach the envs.

``run_attack`` judges what ``env.step`` returns in this process. Over OpenEnv the same
step's result is converted to JSON on the server and read back by the client: a lone
surrogate in an action once made the server answer "Error serializing to JSON", so the
client saw an error where the policy had only sent a wrong answer. :func:`openenv_verdict`
serves the attack's env with ``agentgym_envs.integrations.openenv.serve`` on 127.0.0.1 (a
free port, the attack's ``env_kwargs``), connects the Gymnasium client, resets with the
attack's seed and options and plays its script; once the script ends it sends empty
actions until the episode ends (at most the env's own budget). It got through if

* the server answered a step or the reset with an error, or the client raised,
* a step hung past the attack's ``step_limit_s``,
* the episode ended as ``env_error`` (a policy's input is never the env's fault),
* it scored SUCCESS without ``may_solve``.

The server is stopped afterwards whatever happened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentgym_envs.core.info import Outcome
from agentgym_envs.redteam.watchdog import Hang, watchdog

if TYPE_CHECKING:
    from agentgym_envs.redteam.core import Attack

PADDING = 200  # empty actions after the script, at most (every env ends well before)


def openenv_verdict(attack: Attack) -> str | None:
    """Play ``attack`` over a local OpenEnv server (module docstring); why it got through
    there, or None.

    Raises:
        MissingExtraError: the openenv extra is not installed.
    """
    from agentgym_envs.integrations.extras import require

    require("openenv.core", "openenv-core", "openenv", "playing attacks over OpenEnv")
    from agentgym_envs.integrations.openenv import OpenEnvGymEnv, serve

    server = serve(attack.env_id, port=0, make_kwargs=dict(attack.env_kwargs), max_sessions=1)
    try:
        client = OpenEnvGymEnv(server.url, message_timeout_s=max(attack.step_limit_s, 1.0))
        try:
            return _play(attack, client)
        finally:
            client.close()
    finally:
        server.close()


def _play(attack: Attack, client: Any) -> str | None:
    stage = "the reset"
    info: dict[str, Any] = {}
    try:
        with watchdog() as arm:
            arm(attack.step_limit_s)
            obs, info = client.reset(seed=attack.seed, options=dict(attack.options))
            script = attack.script(obs, info)
            action: str | None = next(script, None)
            ended, played = False, 0
            while not ended and played < attack.max_steps + PADDING:
                stage = f"step {played + 1}"
                arm(attack.step_limit_s)
                obs, _, terminated, truncated, info = client.step(action or "")
                ended, played = terminated or truncated, played + 1
                if action is not None and played < attack.max_steps:
                    try:
                        action = script.send((obs, info))
                    except StopIteration:
                        action = None
                else:
                    action = None
            arm(0)
    except Hang:
        return f"{stage} hung past the watchdog over OpenEnv"
    except Exception as exc:  # an error the client or the server raised is the finding
        return f"{stage} raised {exc!r:.300} over OpenEnv"
    outcome = info.get("outcome")
    if outcome is Outcome.ENV_ERROR:
        return f"the policy's input became an env_error over OpenEnv: {info.get('error')}"
    if outcome is Outcome.SUCCESS and not attack.may_solve:
        return "scored SUCCESS without solving the task (over OpenEnv)"
    return None


__all__ = ["openenv_verdict"]
