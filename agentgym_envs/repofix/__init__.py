"""RepoFix: fix injected bugs in Python repositories, run in :mod:`agentgym_envs.sandbox`.

The fixture env (:mod:`.env`, its tasks, gates and step checks), the real-project env
(:mod:`.real` and the ``real_*`` build modules), seeded bug injection (:mod:`.mutate`) and
grading by observed calls (:mod:`.probes`, comparing outside the sandbox what
``agentgym_envs/sandbox/probe_harness.py`` recorded inside it).
"""
