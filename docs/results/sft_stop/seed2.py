"""The job of seed 2 of docs/results/sft_stop/frozenlake, run in a process of its own
with the settings of the learn command in README.md (see there)."""

from pathlib import Path

import torch

from agentgym_trainers.learn import _override, find_recipe, plan_jobs, run_job

SETTINGS = ["sft_stop_loss=0", "sft_stop_success=0.2", "sft_check_every=25"]
SETTINGS += ["sft_check_episodes=64", "sft_steps=1500"]
COMMAND = (
    "python -m agentgym_trainers.learn frozenlake --seeds 3 --jobs 2 --work /tmp/fl/work "
    "--out /tmp/fl/out --set " + " ".join(SETTINGS)
)

torch.set_num_threads(1)
overrides = dict(_override(x) for x in SETTINGS)
work = Path("/tmp/fl/work2")
jobs = plan_jobs(
    find_recipe("frozenlake"), work / "frozenlake", ["primary"], [2], overrides,
    work / "progress.log", COMMAND,
)  # fmt: skip
key, seed, summary, wall = run_job(jobs[0])
print("done", key, seed, wall, summary.get("sft_steps_done"), flush=True)
