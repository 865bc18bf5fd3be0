"""Fingerprint runs: a fixed set of short training and evaluation runs, reduced to numbers.

A refactor that must not change behaviour is checked by running this before and after and
comparing the two files (they must be equal)::

    python scripts/fingerprint.py --out before.json     # on the old code
    python scripts/fingerprint.py --out after.json      # on the new code
    python scripts/fingerprint.py --compare before.json after.json

Every run is seeded and on the CPU; wall times, throughputs and paths are left out, so the
file depends on the code and the pinned torch only. ``--only NAME`` runs one entry.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BANDIT = [
    "--env", "agentgym-train/DigitFraction-v0",
    "--env-kwargs", '{"charset": "vowels", "prompt_words": 6}',
    "--model", "tiny", "--device", "cpu", "--steps", "3",
    "--group-size", "4", "--tasks-per-step", "2", "--n-envs", "8",
    "--max-new-tokens", "6", "--max-context", "256", "--lr", "1e-2", "--eval-episodes", "4",
]  # fmt: skip
LAKE = [
    "--env", "agentgym/FrozenLake-v0", "--model", "tiny", "--device", "cpu",
    "--steps", "2", "--tasks-per-step", "2", "--group-size", "2", "--n-envs", "4",
    "--max-new-tokens", "8", "--max-context", "1024", "--env-kwargs", '{"max_steps": 4}',
    "--eval-episodes", "4", "--lr", "1e-3",
]  # fmt: skip

TRAIN_RUNS: dict[str, list[str]] = {
    "bandit-grpo": [*BANDIT, "--algo", "grpo"],
    "bandit-rloo": [*BANDIT, "--algo", "rloo"],
    "bandit-reinforce": [*BANDIT, "--algo", "reinforce"],
    "bandit-ppo": [*BANDIT, "--algo", "ppo"],
    "bandit-grpo-seed1": [*BANDIT, "--algo", "grpo", "--seed", "1"],
    "lake-grpo-sft": [*LAKE, "--algo", "grpo", "--sft-steps", "2", "--sft-episodes", "4"],
    "lake-ppo": [*LAKE, "--algo", "ppo"],
    "lake-branch": [*LAKE, "--algo", "grpo", "--branch", "every", "--branch-k", "2"],
    "lake-async": [*LAKE, "--algo", "grpo", "--rollout", "async"],
}
EVAL_RUNS: dict[str, list[str]] = {
    "eval-smoke": ["--suite", "smoke", "--policy", "oracle", "random", "--trials", "1"],
}
# keys that measure the machine rather than the code
VOLATILE = (
    "time",
    "_s",
    "per_s",
    "frac_",
    "wall",
    "path",
    "dir",
    "created",
    "host",
    "pid",
    "checkpoint",
    "run_id",
    "store",
    "started",
)


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _stable(v)
            for k, v in sorted(value.items())
            if not any(mark in k for mark in VOLATILE)
        }
    if isinstance(value, list):
        return [_stable(v) for v in value]
    if isinstance(value, float):
        return round(value, 6)
    return value


def _agentgym(args: list[str]) -> None:
    command = [sys.executable, "-m", "agentgym_envs.cli", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def train_fingerprint(args: list[str], folder: Path) -> Any:
    _agentgym(["train", *args, "--run-dir", str(folder)])
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((folder / "summary.json").read_text())
    return _stable({"metrics": rows, "summary": summary})


def eval_fingerprint(args: list[str], folder: Path) -> Any:
    _agentgym(["eval", *args, "--out", str(folder)])
    reports = sorted(folder.rglob("*.json"))
    out = {}
    for path in reports:
        try:
            out[str(path.relative_to(folder))] = _stable(json.loads(path.read_text()))
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
    return out


def run_all(only: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="agentgym-fingerprint-") as tmp:
        for name, args in {**TRAIN_RUNS, **EVAL_RUNS}.items():
            if only and name not in only:
                continue
            print(f"fingerprint: {name}", flush=True)
            folder = Path(tmp) / name
            if name in TRAIN_RUNS:
                found[name] = train_fingerprint(args, folder)
            else:
                found[name] = eval_fingerprint(args, folder)
    return found


def compare(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}/{k}: only in one" for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += compare(a[k], b[k], f"{where}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in compare(x, y, f"{where}[{i}]")
        ]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (_stable(json.loads(p.read_text())) for p in args.compare)
        runs = sorted(set(before) & set(after))  # a file made with --only has fewer runs
        differences = compare({k: before[k] for k in runs}, {k: after[k] for k in runs})
        print(f"compared {len(runs)} runs: {', '.join(runs)}")
        print("\n".join(differences[:200]) or "identical")
        return 1 if differences else 0
    if args.out is None:
        parser.error("give --out FILE or --compare BEFORE AFTER")
    args.out.write_text(json.dumps(run_all(args.only), indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
