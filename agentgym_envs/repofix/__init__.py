"""RepoFix: fix injected bugs in Python repositories, run in :mod:`agentgym_envs.sandbox`.

The fixture env (:mod:`.env`, its tasks, gates and step checks), the real-project env
(:mod:`.real` and the ``real_*`` build modules), seeded bug injection (:mod:`.mutate`) and
grading by observed calls (:mod:`.probes`, comparing outside the sandbox what
``agentgym_envs/sandbox/probe_harness.py`` recorded inside it).

:data:`FAMILY` is what the shared layers know of the family
(:class:`~agentgym_envs.core.family.Family`), named ``sandbox`` after where its code
runs; importing this package imports no env.
"""

from agentgym_envs.core.family import Family, FamilyCost

FAMILY = Family(
    name="sandbox",
    package=__name__,
    # a bubblewrap process per tool call and a workspace on tmpfs per episode
    cost=FamilyCost(cpus_per_env=1.0, memory_mib_base=250, memory_mib_per_env=150),
    bench="agentgym_envs.repofix.bench:bench_repofix",
    bench_table="agentgym_envs.repofix.bench:print_bench",
    bench_ray=("RepoFix",),
    redteam="agentgym_envs.redteam.sandbox:attacks",
    injection={"RepoFix": "agentgym_envs.repofix.injection:repofix"},
    test_marks=("sandbox",),
)

__all__ = ["FAMILY"]
