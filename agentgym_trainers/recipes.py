"""The committed CPU learning recipes (run by ``python -m agentgym_trainers.learn``).

Each recipe's ``why`` says why it works; docs/results/README.md has the numbers.
"""

from __future__ import annotations

from agentgym_trainers.learn import ModelShape, Recipe

# What every recipe shares: a from-scratch model learns nothing from the env's constant
# system prompt, so it is left out (sequences are about half as long); 200 held-out test
# episodes evaluated before SFT, after SFT and after RL, with the policy as it is trained
# and sampled (temperature 1) and greedily.
_COMMON = {
    "system_prompt": False,
    "eval_episodes": 200,
    "eval_temperature": 1.0,
    "eval_greedy_too": True,
    "temperature": 1.0,
    "seed": 0,
    "sampling_seed": 0,
    "device": "cpu",
}

FROZENLAKE = Recipe(
    name="frozenlake",
    model=ModelShape(vocab_size=512, hidden_size=64, num_layers=2),
    train={
        **_COMMON,
        "env": "agentgym/FrozenLake-v0",
        "env_kwargs": {"max_steps": 8},
        "difficulty": "easy",
        "max_new_tokens": 16,
        "max_context": 1024,
        "sft_steps": 450,
        "sft_episodes": 256,
        "sft_lr": 3e-3,
        "micro_batch_size": 8,
        "steps": 220,
        "tasks_per_step": 16,
        "group_size": 8,
        "n_envs": 128,
        "lr": 1e-3,
        "warmup_steps": 2,
    },
    why=(
        "A 64-wide, 2-layer Llama with a 512-token vocabulary fitted to FrozenLake's text "
        "(one token per grid cell and digit) and no system prompt: short sequences, so "
        "128 episodes per RL step take a few seconds on one core. The SFT warm start "
        "(256 oracle episodes, batch 16, lr 3e-3) is stopped at 450 steps, just after the "
        "transition where the model starts reading positions (the oracle's direction is "
        "at chance for about 300 steps): its features exist, but its sampled policy "
        "still wanders. GRPO then has signal: 16 tasks x 8 rollouts at temperature 1, "
        "8 moves at most (a 4x4 lake needs 3 to 6), success 1 plus milestone progress "
        "0.5 as shaping, so most groups have reward variance; one update per step at "
        "lr 1e-3 with 2 warmup steps (four updates at 3e-3 rose faster and collapsed), "
        "for 220 steps: on a validation slice (the last 40 train tasks held out, "
        "docs/results/validation/frozenlake) the gain after 140 steps was +4.5 points "
        "sampled and after 220 +16.5 (greedy +7.5 and +27.5): the training success "
        "was still rising at 140, and a weaker SFT start needs the longer run. "
        "Starting RL earlier (350 SFT steps) left the training success flat: RL sharpens "
        "features SFT began, it did not build them in this budget. The evaluation "
        "samples at temperature 1, the policy RL optimises; greedy results are reported "
        "next to it."
    ),
)

DUNGEON = Recipe(
    name="dungeon",
    model=ModelShape(vocab_size=1024, hidden_size=96, num_layers=3, intermediate_size=256),
    train={
        **_COMMON,
        "env": "agentgym/Dungeon-v0",
        "env_kwargs": {"max_steps": 12, "reward_config": {"local_weight": 0.05}},
        "difficulty": "easy",
        "train_pool": 3000,
        "max_new_tokens": 24,
        "max_context": 1024,
        "sft_steps": 1600,
        "sft_stop_loss": 0.10,
        "sft_episodes": 1024,
        "sft_lr": 3e-3,
        "micro_batch_size": 8,
        "steps": 120,
        "tasks_per_step": 8,
        "group_size": 8,
        "n_envs": 64,
        "lr": 1e-3,
        "warmup_steps": 2,
    },
    why=(
        "Dungeon easy is partially observable (only the current room is shown) and takes 4 to 7 "
        "oracle actions of three tools with item and direction arguments, so it needs a larger "
        "model than FrozenLake: a 96-wide, 3-layer Llama with a 1,024-token vocabulary fitted to "
        "Dungeon's text, 1,024 oracle demonstrations from 3,000 train tasks, 12 actions at most. "
        "SFT (batch 16, lr 3e-3) stops when the mean loss of its last 25 steps reaches 0.10 nats "
        "per agent token (900 steps on the validation slice, 1,209 on the full pool): a loss "
        "threshold, not a step count, because where the model starts reading rooms moves by 100 "
        "steps with the data order, and a fixed count landed before that point on one pool and "
        "after it on another. Past the threshold SFT alone climbs fast (training success about "
        "0.2 at 900 steps, 0.7 at 1,500), so the start is early on purpose. GRPO then plays 8 "
        "tasks x 8 rollouts per step at lr 1e-3 for 120 steps, with the env's step checks on "
        "(local_weight 0.05: -0.25 for a call the room shows must fail, such as an exit that is "
        "not there or a key used on the wrong door; +share of the milestones reached) next to the "
        "layered reward (success 1, milestones 0.5, call costs). On the validation slice (the "
        "last 40 train tasks held out, 80 RL steps; exploratory runs, docs/results/README.md) "
        "this gained +22.5 points (+23.0 from a later stop at loss 0.07). Without step checks, "
        "subtracting the group mean but not dividing by its std (adv_scale none), the gain was "
        "+12.0 with milestones and +7.5 on success alone. In the first 10 RL steps 43% of the "
        "groups have no success; their members then differ only by small amounts, and GRPO's "
        "division by the group's std makes whatever separates them a unit-size advantage. With "
        "step checks that is how many calls the room showed must fail and how far the episode "
        "got: the reading skill the SFT start lacks. On success alone with the std division only "
        "the call-cost ledger separates failures, and that run collapsed to repeating go() within "
        "20 steps. The evaluation samples at temperature 1; greedy results are reported next to "
        "it."
    ),
)

RECIPES: dict[str, Recipe] = {r.name: r for r in (FROZENLAKE, DUNGEON)}
