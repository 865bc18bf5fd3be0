"""The ``Policy`` protocol that every policy (scripted or LLM) implements."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError, did_you_mean
from agentgym_envs.integrations.extras import optional_imports


@runtime_checkable
class Policy(Protocol):
    """A batched policy: a list of observations in, a list of action texts out.

    ``slots[i]`` names the env slot that ``observations[i]`` comes from; a slot keeps
    its number for a whole episode, and finished slots are left out of the batch.
    ``reset(indices)`` says which slots start a new episode (so stateful policies, such
    as LLMs with a chat history, can clear them); their infos then carry ``system``.
    """

    name: str

    def reset(self, indices: Sequence[int]) -> None:
        """Forget any per-episode state of these slots."""
        ...

    def act(
        self,
        observations: Sequence[str],
        infos: Sequence[Mapping[str, Any]],
        slots: Sequence[int] | None = None,
    ) -> list[str]:
        """Return one action text per observation (``slots`` defaults to 0..n-1)."""
        ...


POLICIES = ("oracle", "random", "noop")
LLM_PREFIXES = ("hf:", "openai:")
ACCEPTED_SPECS = (
    '"oracle", "random", "noop", "hf:<model>" (hf:smollm2, hf:/path/to/folder, '
    'hf:/path/to/model.gguf) or "openai:<base_url>#<model>" '
    "(openai:http://127.0.0.1:8000/v1#smollm2)"
)


def make_policy(
    spec: str, envs: Sequence[gym.Env[Any, Any]], seed: int = 0, **options: Any
) -> Policy:
    """Build a policy from a spec string for these env slots.

    Args:
        spec: ``"oracle"``, ``"random"``, ``"noop"``, ``"hf:<model>"`` (a local
            transformers model: ``hf:smollm2``, a model folder or a ``.gguf`` file) or
            ``"openai:<base_url>#<model>"`` (an OpenAI-compatible endpoint).
        envs: the env slots (scripted policies read them; LLM policies do not).
        seed: the policy's seed (random choices; LLM sampling with temperature > 0).
        **options: passed to the LLM policy's constructor (``temperature``,
            ``max_new_tokens``, ``device``, ``tool_mode``, ...); scripted policies take none.
            ``max_tokens`` and ``max_new_tokens`` name the same limit for both LLM kinds.

    Raises:
        ConfigError: unknown spec (with the closest match and the accepted forms), or
            options given to a scripted policy.
        MissingExtraError: an ``hf:`` policy without the train extra (torch, transformers).
    """
    from agentgym_envs.policies.reference import NoopPolicy, OraclePolicy, RandomPolicy

    if spec in POLICIES and options:
        raise ConfigError(
            f"the {spec!r} policy takes no options, got {sorted(options)}; options are for "
            "hf:<model> and openai:<base_url>#<model> policies"
        )
    if spec == "oracle":
        return OraclePolicy(envs)
    if spec == "random":
        return RandomPolicy(seed=seed)
    if spec == "noop":
        return NoopPolicy(envs)
    if spec.startswith("hf:") and len(spec) > 3:
        with optional_imports(f"the {spec!r} policy"):  # torch loads only here
            from agentgym_envs.policies.hf import HFPolicy

        options = _alias(options, "max_tokens", "max_new_tokens")
        _check_options(HFPolicy, options)
        return HFPolicy(spec[3:], seed=seed, **options)
    if spec.startswith("openai:"):
        base_url, sep, model = spec[len("openai:") :].rpartition("#")
        if not sep or not base_url or not model:
            raise ConfigError(
                f"expected openai:<base_url>#<model>, got {spec!r}; "
                "e.g. openai:http://127.0.0.1:8000/v1#smollm2"
            )
        from agentgym_envs.policies.openai_compat import OpenAIPolicy

        options = _alias(options, "max_new_tokens", "max_tokens")
        _check_options(OpenAIPolicy, options)
        return OpenAIPolicy(base_url, model, seed=seed, **options)
    known = (*POLICIES, "hf:smollm2")
    raise ConfigError(
        f"unknown policy {spec!r}.{did_you_mean(spec, known)} Expected one of: {ACCEPTED_SPECS}."
    )


def _check_options(cls: type, options: Mapping[str, Any]) -> None:
    """Reject options the policy class does not take, naming the ones it does."""
    params = inspect.signature(cls).parameters
    accepted = [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY and n != "seed"]
    for name in options:
        if name not in accepted:
            raise ConfigError(
                f"{cls.__name__} has no option {name!r}.{did_you_mean(name, accepted)} "
                f"Its options: {', '.join(accepted)}"
            )


def _alias(options: Mapping[str, Any], alias: str, name: str) -> dict[str, Any]:
    """Rename option ``alias`` to ``name`` (both LLM kinds take either spelling)."""
    out = dict(options)
    if alias in out:
        if name in out:
            raise ConfigError(f"give {name!r} or {alias!r}, not both (they are the same limit)")
        out[name] = out.pop(alias)
    return out
