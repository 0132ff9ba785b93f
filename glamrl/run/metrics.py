"""The one set of metric names: what the training loops log, under the same name in every output.

A loop logs `{name: value}` rows (`glamrl.run.log.RunLogger.log`); each name is a `log.csv` column, the
leaf of the TensorBoard and tracker tag (`tag`: `charts/return_mean`, `losses/approx_kl`, CleanRL's two
groups) and, with its `label`, the title of its plot. `LOG_METRICS` documents the names the loops log today
(docs/reference/metrics.md is generated from it); a name outside it is logged all the same, as a new
column under `charts/`, and titled by its name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from glamrl.stats import MIN_REPEATS

GROUPS = ("charts", "losses")
"""TensorBoard and tracker groups: the run's progress and episodes; the optimiser's statistics."""


@dataclass(frozen=True)
class Metric:
    name: str
    """the log.csv column, and the leaf of its tag."""
    group: str
    """one of `GROUPS`."""
    label: str
    """what a plot titles it."""
    help: str
    """what it measures, and which loops log it."""

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"metric {self.name!r}: group must be one of {', '.join(GROUPS)}, not {self.group!r}")


LOG_METRICS: dict[str, Metric] = {m.name: m for m in (
    # the progress of the run (every loop); frames is the x axis and the TensorBoard and tracker step
    Metric("update", "charts", "log rows", "the row's number, from 1: the rows logged so far (a checkpoint's "
                                           "`log_rows`), one per PPO update, per `drrn.log_every` frames of DRRN, "
                                           "per `bc.log_every` optimizer steps of BC"),
    Metric("steps", "charts", "optimizer steps", "BC: optimizer steps so far"),
    Metric("episodes", "charts", "episodes", "training episodes finished so far, all envs and ranks (PPO, DRRN)"),
    Metric("frames", "charts", "frames", "environment steps so far, all envs and ranks (BC: demonstration records "
                                         "seen); the step of TensorBoard and of the tracker"),
    Metric("FPS", "charts", "frames per second", "frames per second of wall clock over the row"),
    Metric("duration", "charts", "training seconds", "seconds of training so far, summed over every invocation "
                                                     "(what `run.max_minutes` counts)"),
    # the training episodes that ended during the row (PPO, DRRN; empty when none ended), GLAM's columns
    Metric("return_mean", "charts", "mean return", "mean return of the episodes that ended during the row"),
    Metric("return_std", "charts", "return std", "standard deviation of their returns"),
    Metric("return_min", "charts", "lowest return", "lowest of their returns"),
    Metric("return_max", "charts", "highest return", "highest of their returns"),
    Metric("success_rate", "charts", "success rate", "share of them that reached the goal (sampled actions); on "
                                                     "a level of several task kinds (a Mixed level), also "
                                                     "success_rate_TASK for each kind, e.g. success_rate_go_to, "
                                                     "and ended_TASK, how many of the kind's episodes ended "
                                                     "during the row"),
    Metric("num_frames_mean", "charts", "mean episode length (frames)", "their mean length in frames"),
    Metric("num_frames_std", "charts", "episode length std", "standard deviation of their lengths"),
    Metric("num_frames_min", "charts", "shortest episode (frames)", "the shortest of them"),
    Metric("num_frames_max", "charts", "longest episode (frames)", "the longest of them"),
    # the update, averaged over its minibatches (PPO; DRRN and BC log loss and grad_norm too)
    Metric("entropy", "losses", "policy entropy", "PPO: entropy of the policy over the candidate actions"),
    Metric("policy_loss", "losses", "policy loss", "PPO: the clipped surrogate loss"),
    Metric("value_loss", "losses", "value loss", "PPO: the value loss (clipped as GLAM's unless `ppo.clip_value` "
                                                 "is off; 0 with `ppo.advantage=batch_baseline`, which has no critic)"),
    Metric("loss", "losses", "loss", "the loss minimised: PPO's total, DRRN's TD loss, BC's -log p(action | "
                                     "prompt)"),
    Metric("grad_norm", "losses", "gradient norm", "norm of the gradients before clipping"),
    Metric("approx_kl", "losses", "approximate KL", "PPO: estimate of KL(old policy || new), (ratio - 1) - log ratio"),
    Metric("clipfrac", "losses", "clipped fraction", "PPO: share of samples whose probability ratio was clipped"),
    Metric("mirror_kl", "losses", "mirror KL", "PPO with `ppo.mirror_coef` > 0: symmetrised KL between the policy "
                                               "on a prompt and on its mirror image, turn left and turn right "
                                               "swapped back (0: the policy is mirror-symmetric)"),
    Metric("explained_variance", "losses", "explained variance", "PPO: how much of the returns' variance the "
                                                                 "values explain (1: all, 0: none; nan with "
                                                                 "`ppo.advantage=batch_baseline`)"),
    Metric("critic_ceiling", "losses", "critic's ceiling", "PPO with an LLM policy: the explained variance the best "
                                                            "function of the critic's inputs (the prompt; with "
                                                            "`model.critic_reads_step`, the prompt and step count) "
                                                            "could reach on the rollout, one frame per input and "
                                                            "episode (`glamrl.stats.explainable_variance`); "
                                                            "explained_variance / critic_ceiling is the share of "
                                                            "what it could explain that the critic does (nan "
                                                            f"where fewer than {MIN_REPEATS} frames repeat an "
                                                            "input across episodes, too few to estimate it)"),
    Metric("rss_gb", "charts", "resident memory (GB)", "the training process's resident set at the row's end, in GB "
                                                        "(rank 0; VmRSS)"),
    Metric("peak_rss_gb", "charts", "peak resident memory (GB)", "the most the training process's resident set has "
                                                                  "been so far, in GB (rank 0; VmHWM)"),
    Metric("learning_rate", "charts", "learning rate", "PPO: the update's `ppo.lr` (lowered at each update by "
                                                       "`ppo.anneal_lr`)"),
    Metric("collect_FPS", "charts", "collection frames per second", "PPO: frames per second while collecting"),
    Metric("update_FPS", "charts", "update frames per second", "PPO: frames per second while optimising"),
    Metric("trunk_hit_rate", "charts", "trunk cache hit rate", "PPO with `model.train_layers`: share of the "
                                                               "collection's prompts whose frozen lower blocks' "
                                                               "output came from the cache (seen in an earlier "
                                                               "rollout or earlier in this one)"),
    Metric("trunk_cache_mb", "charts", "trunk cache (MiB)", "PPO with `model.train_layers`: the cache's size after "
                                                            "the collection (at most `model.trunk_cache_mb`, plus "
                                                            "the rollout's own entries)"),
    Metric("trunk_prefix_share", "charts", "trunk prefix share", "PPO with `model.prefix_cache_mb`: share of the "
                                                                     "collection's new prompts' tokens whose frozen "
                                                                     "blocks' keys and values came from a kept "
                                                                     "prompt that began as they do"),
    Metric("first_ratio_dev", "losses", "first minibatch max |ratio - 1|",
           "PPO: max |ratio - 1| on the update's first minibatch, 0 up to rounding when collection and update "
           "compute alike"),
    Metric("value_mean", "losses", "value statistics mean", "PPO with `ppo.value_norm`: the running mean of the "
                                                            "returns"),
    Metric("value_std", "losses", "value statistics std", "PPO with `ppo.value_norm`: their running standard "
                                                          "deviation"),
    Metric("q_mean", "losses", "mean Q", "DRRN: mean Q value of the replayed actions"),
    Metric("epsilon", "charts", "exploration epsilon", "DRRN: the epsilon of epsilon-greedy exploration at the "
                                                       "row's end"),
)}


def tag(name: str) -> str:
    """The TensorBoard and tracker tag of a logged name: its group, then the name (a name holding a `/` is its
    own tag; an unlisted one is under `charts/`)."""
    if "/" in name:
        return name
    metric = LOG_METRICS.get(name)
    return f"{metric.group if metric else 'charts'}/{name}"


def label(name: str) -> str:
    """A plot's title for a logged name: its label (success_rate_TASK: "success rate: TASK" in words, e.g.
    "success rate: pick up, then go to"), or the name itself when it is unlisted."""
    metric = LOG_METRICS.get(name)
    if metric is None and name.startswith("success_rate_"):
        task = name.removeprefix("success_rate_").replace("_seq_", ", then ").replace("_", " ")
        return f"{LOG_METRICS['success_rate'].label}: {task}"
    return metric.label if metric else name


def column_order(names: Iterable[str]) -> list[str]:
    """log.csv's column order for `names`: the listed ones in `LOG_METRICS`' order (GLAM's columns first),
    then the others in the order given."""
    names = list(dict.fromkeys(names))
    return [n for n in LOG_METRICS if n in names] + [n for n in names if n not in LOG_METRICS]
