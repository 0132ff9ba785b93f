"""How a run's seed (`env.seed`) becomes the seeds its episodes play from (`env.seeding`).

A level's `reset(seed=s)` draws the episode (task kind, layout, mission) from `s` alone, whatever the policy did
before, and an env resets itself from its own generator when an episode ends. A run's episodes are thus fixed by
the seeds of its first reset (its training streams) and by its evaluation seeds. The schemes:

- `spread` (the default): seed S trains env i of its first reset from S x 2**32 + i and plays evaluation episode k
  from S x 2**32 + 2**31 + k. Two seeds of a run never share an episode, so seeds are independent draws; the rows
  of one experiment still play each seed's episodes alike (paired comparisons).
- `offset` (glamrl's first scheme, and what a run directory's config.yaml written before `env.seeding` existed
  reads as): seed S trains from S + i and evaluates from S + 1,000,000 + k. Seeds S and S + 1 then share all but
  one training stream and all but one evaluation episode, and intervals over seeds read too narrow.

Training streams stay below evaluation ones: a run's later resets (a resume, DRRN's rows, the ranks of
distributed training) take the next N seeds each, far fewer than 2**31 (or 1,000,000 with `offset`).
"""

from __future__ import annotations

SEEDINGS = ("spread", "offset")
"""The values of `env.seeding`."""
LEGACY_SEEDING = "offset"
"""What a saved run config without `env.seeding` ran with (`glamrl.run.dir.RunDir.read_config`)."""
STRIDE = 2**32
"""spread: seed S's episodes play from S x STRIDE."""
SPREAD_EVAL_OFFSET = 2**31
"""spread: evaluation episodes play from S x STRIDE + SPREAD_EVAL_OFFSET."""
OFFSET_EVAL_OFFSET = 1_000_000
"""offset: evaluation episodes play from S + OFFSET_EVAL_OFFSET."""


def train_seed(seed: int, seeding: str) -> int:
    """The seed of the first training episode of seed `seed` (env i of the first reset plays from it + i)."""
    return seed * STRIDE if _checked(seeding) == "spread" else seed


def eval_seed(seed: int, seeding: str) -> int:
    """The seed of the first evaluation episode of seed `seed` (a run's env.seed, or `--seed`): episode k plays
    from eval_seed(seed, seeding) + k, in `glamrl eval`, its suite, `glamrl play` and a training run's evaluations."""
    if _checked(seeding) == "spread":
        return seed * STRIDE + SPREAD_EVAL_OFFSET
    return seed + OFFSET_EVAL_OFFSET


def _checked(seeding: str) -> str:
    if seeding not in SEEDINGS:
        raise ValueError(f"seeding must be one of {', '.join(SEEDINGS)}, got {seeding!r}")
    return seeding
