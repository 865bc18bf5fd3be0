"""The SQLite business simulators: ``retail`` and ``calendar``, on a shared base.

Shared here: the env base (:mod:`.base`), tool groups (:mod:`.toolsets`), the generic
rules (:mod:`.rules`) and policy documents (:mod:`.policy`), the simulated user
(:mod:`.user`, :mod:`.answers`), the episode databases (:mod:`.db`), the episode's plain
data (:mod:`.episode`) and the oracle (:mod:`.oracle`).
"""
