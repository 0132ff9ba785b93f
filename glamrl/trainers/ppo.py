"""Online PPO fine-tuning of an agent (the LLM, NPAE or symbolic) in BabyAI-Text, read top to bottom.

Phases of each update: collect (the policy scores actions under inference mode) →
bootstrap and GAE → flatten → optimise the PPO loss over epochs of minibatches →
log → checkpoint. A run directory holds everything; running again on it resumes.
The run's skeleton (open, restore, record the config, log, checkpoint, evaluate) is `glamrl.trainers.common`'s
`Session`; what several ranks add (gathering, averaging, sharding) is `glamrl.parallel`'s.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from glamrl.agents.base import ActorCriticNetwork
from glamrl.agents.factory import inherited_critic, init_source, make_agent, start_model
from glamrl.config import PPOConfig, TrainConfig
from glamrl.envs.mirror import mirror_actions
from glamrl.errors import GlamrlError
from glamrl.eval.probes import read_run_probes, start_probe_log
from glamrl.llm.policy import LLMPolicy, TimedPrompt, mirror_input
from glamrl.parallel import distributed, sharding
from glamrl.rl.buffer import Batch, RolloutBuffer
from glamrl.rl.gae import compute_gae, discounted_returns
from glamrl.rl.ppo import Mirror, accumulate_gradients
from glamrl.rl.value_norm import NoValueNorm, ValueNormalizer, make_value_normalizer
from glamrl.rollout import step
from glamrl.run.checkpoint import Progress
from glamrl.run.log import episode_stats
from glamrl.stats import MIN_REPEATS, explainable_variance
from glamrl.trainers.common import TrainResult, open_session, seed_everything

class TrainingDiverged(GlamrlError, RuntimeError):
    """The PPO loss became NaN or infinite."""


def train_ppo(cfg: TrainConfig, run_dir: Path, resume: bool = False, progress: bool = True,
              say: Callable[[str], None] = print) -> TrainResult:
    """Train (or resume, from RUN_DIR's last checkpoint) the PPO agent `cfg` describes (a kind the registry
    trains with ppo: llm, symbolic).

    The caller holds RUN_DIR's lock and decided `resume` (`glamrl.trainers.common.train_run_dir`).
    Under torchrun (see `glamrl.parallel.distributed`) every rank calls this; rank 0 alone touches RUN_DIR.
    """
    session = open_session(cfg, run_dir, resume, "ppo", progress, say)
    ranks, p = distributed.current(), cfg.ppo
    N, T, K, R = cfg.env.num_envs, p.num_steps, ranks.world_size, cfg.recurrence  # R: steps per replayed sequence
    frames_per_update = cfg.batch_size * K  # all ranks together

    # ---- envs, model, optimizer, probes
    envs = cfg.env.make_vector_env()
    per_task = cfg.env.several_tasks  # success_rate_TASK columns too
    source = init_source(cfg) if session.resumed is None else None  # agent.init_from's checkpoint, read once
    policy = start_model(cfg, source)
    # agent.init_from's PPO run gives its critic as it learned it: its value statistics, and no new initialisation
    inherited = inherited_critic(source)
    del source  # its tensors (the source run's weights) are not held through the run
    sharding.shard(policy, cfg.run.sharding)  # fsdp: before the optimizer, whose parameters become the ranks' shards
    params = [w for w in policy.parameters() if w.requires_grad]
    device = params[0].device  # the PPO loss runs where the model computes
    # fused: one pass over the weights and no temporaries (the default foreach Adam allocates one the size of the
    # weights at every step: 0.55 GB for SmolLM2, the update's largest transient); FSDP's DTensor shards: foreach
    optimizer = torch.optim.Adam(parameter_groups(policy, p), betas=(p.adam_beta1, p.adam_beta2), eps=p.adam_eps,
                                 fused=not sharding.is_sharded(policy))
    # model.value_head_init=standardized initialises a head that starts untrained: a new run's or a clone's
    initialise_critic = cfg.agent.kind == "llm" and cfg.model.value_head_init == "standardized" \
        and session.resumed is None and inherited is None
    # the configured rates, which ppo.anneal_lr scales (a restored optimizer holds its last update's lowered ones)
    set_lrs = [group["lr"] for group in optimizer.param_groups]
    value_norm = make_value_normalizer(p)  # the identity unless ppo.value_norm
    agent = make_agent(cfg, policy, envs)
    mirror = Mirror(mirror_input, mirror_actions(agent.action_names)) if p.mirror_coef > 0 else None
    probe_set = read_run_probes(cfg)

    # ---- resume (weights, optimizer, RNGs, value statistics) and start every rank from the same weights; then
    # record the config (all of the above could be built and restored), evaluate a new run, open the log
    update, frames, episodes, duration = session.restore(policy, optimizer)
    if session.resumed is not None:
        value_norm.restore(session.resumed.extra)
    elif inherited is not None and "value_norm" in inherited:  # a run without ppo.value_norm kept none
        value_norm.restore(inherited)
    sharding.replicate(policy)  # every rank from rank 0's (seeded or restored) weights
    if ranks.active:  # each rank samples its own actions and minibatches
        seed_everything(cfg.env.seed + 7919 * (update * K + ranks.rank))

    success_before = session.begin(policy)
    # env i of rank r starts at train_seed + (update * K + r) * N + i: no two envs, ranks or updates share a
    # seed, and a resumed run starts fresh episodes
    obs, _ = envs.reset(seed=cfg.env.train_seed + (update * K + ranks.rank) * N)
    with sharding.gathered(policy):
        probes = start_probe_log(cfg, session.run, policy, probe_set, session.resumed_log_rows) \
            if session.is_main else None

    buffer = RolloutBuffer(T, N)
    recent = deque(maxlen=100)  # success of the last episodes, for the progress bar
    bar = tqdm(total=p.total_frames, initial=frames, unit="frame", disable=not session.progress)
    start_time = time.time() - duration
    stop = session.out_of_time(duration)  # run.max_minutes counts the run's training time over every invocation
    while frames < p.total_frames and not stop:  # in frames: a resumed run may have another number of ranks
        update_start = time.time()
        finished = []
        learning_rate = set_learning_rates(optimizer, set_lrs, p, frames)  # ppo.anneal_lr: lower at each update

        # ---- 1. collect T steps in N envs (with model.train_layers, the frozen trunk's output is kept),
        # then V(last observation) for the bootstrap; a sharded policy acts on its gathered weights
        standardize = update == 0 and initialise_critic
        final_inputs = []  # with standardize: (t, envs, policy inputs) of the time-outs bootstrapped
        with sharding.gathered(policy):
            with policy.collecting():
                for t in range(T):
                    s = step(envs, agent, obs)
                    d = s.decision
                    buffer.add(t, d.inputs, d.actions, d.log_probs, d.values, s.rewards * p.reward_scale,
                               s.terminated, s.truncated)
                    cut = np.flatnonzero(s.truncated & ~s.terminated)
                    if p.bootstrap_truncation and len(cut):  # V(final observation) continues a time-limit cut
                        buffer.final_values[t, cut] = agent.values(s.final_obs(cut), cut)
                        if standardize:  # valued again below, by the standardised head
                            final_inputs.append((t, cut, agent.inputs(s.final_obs(cut), cut)))
                    agent.end_episodes(s.done)
                    finished += s.episodes
                    obs = s.next_obs
                if standardize:
                    standardize_value_head(policy, buffer, final_inputs)
                # (N,); batch_baseline bootstraps with 0 and reads no critic
                next_value = agent.values(obs, range(N)) if p.advantage == "gae" else None
        frames += frames_per_update
        finished = distributed.gather_lists(finished)                                 # every rank's episodes
        episodes += len(finished)
        recent.extend(e.success for e in finished)
        collect_time = time.time() - update_start

        # ---- 2. bootstrap value if not done, then GAE in the returns' units (or ppo.advantage=batch_baseline's
        # returns-to-go less their mean); fold the returns into the value statistics (ppo.value_norm);
        # 3. flatten the batch: (T, N) -> (T * N,)
        batch, explained = rollout_batch(buffer, next_value, value_norm, p)
        ceiling = critic_ceiling(buffer, batch.returns)  # what the best critic of these inputs could explain
        b_device = batch.to(device)

        # ---- 4. optimise the policy and value over epochs of minibatches of whole sequences: R consecutive
        # steps of one env, replayed from the memory stored at their first step (R = 1: single frames)
        # (ppo.mirror_coef: the mirror images' frozen-trunk outputs are kept as the rollout's are)
        stats: list[dict[str, float]] = []  # one entry per forward/backward chunk
        with policy.keeping() if mirror is not None else contextlib.nullcontext():
            for epoch in range(p.epochs):
                for mb_idx in buffer.minibatches(R, p.minibatch_size):                 # (R, S)
                    optimizer.zero_grad(set_to_none=True)
                    try:
                        stats += accumulate_gradients(policy, b_device, mb_idx, agent.action_names, p, mirror)
                    except FloatingPointError:
                        raise TrainingDiverged(
                            f"non-finite PPO loss at update {update + 1}, epoch {epoch + 1}; the last good "
                            f"checkpoint is in {session.run.checkpoints} (try a lower ppo.lr)") from None
                    stats[-1]["grad_norm"] = sharding.average_and_clip_gradients(policy, params, p.max_grad_norm)
                    optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # no gradients held while the next rollout is collected
        if diverged(policy, b_device, agent.action_names, params):  # before it is logged or saved
            raise TrainingDiverged(
                f"non-finite weights, probabilities or values after update {update + 1}; "
                f"the last good checkpoint is in {session.run.checkpoints} (try a lower ppo.lr)")
        update += 1
        if cfg.run.check_replicas:
            distributed.check_replicas_equal(params, f"after update {update}")
        update_time = time.time() - update_start - collect_time

        # ---- 5. log, then checkpoint (a kill in between replays this update on resume)
        # every term of PPOLoss and grad_norm, over the update's chunks (ratio_dev: first_ratio_dev below)
        terms = sorted({name for st in stats for name in st} - {"ratio_dev"})  # one order on every rank
        losses = distributed.average(torch.tensor([np.nanmean([st.get(name, np.nan) for st in stats])
                                                   for name in terms], dtype=torch.float64))
        metrics = {
            "update": update, "frames": frames, "episodes": episodes,
            "FPS": frames_per_update / (collect_time + update_time), "duration": time.time() - start_time,
            "collect_FPS": frames_per_update / collect_time, "update_FPS": frames_per_update / update_time,
            "learning_rate": learning_rate,
            **episode_stats(finished, per_task),
            **dict(zip(terms, losses.tolist())),
            "explained_variance": explained,
            "critic_ceiling": ceiling,
            **value_norm.metrics(),
            "first_ratio_dev": max(st["ratio_dev"] for st in stats[:p.grad_accum]),
            **policy.collection_metrics(),  # an LLM policy's frozen-trunk cache (model.train_layers)
        }
        if probe_set is not None:  # every rank gathers a sharded policy's weights, rank 0 records
            with sharding.gathered(policy):
                if probes is not None:
                    probes.record(policy, update, frames)
        if cfg.run.max_minutes is not None:  # rank 0's clock decides for all ranks
            stop = distributed.broadcast_object(session.out_of_time(metrics["duration"]))
        stop = stop or session.reached_success(metrics)  # the same gathered episodes on every rank
        session.log(metrics)
        if update % cfg.run.checkpoint_every == 0 or frames >= p.total_frames or stop:
            session.save(policy, optimizer, Progress(update, frames, episodes, metrics["duration"]),
                         extra=value_norm.checkpoint_extra())
        bar.update(frames_per_update)
        if recent:
            bar.set_postfix(fps=f"{metrics['FPS']:.1f}", success=f"{np.mean(recent):.2f}")
    bar.close()
    envs.close()

    return session.finish(policy, update, frames, success_before)


def rollout_batch(buffer: RolloutBuffer, next_value: torch.Tensor | None,
                  value_norm: ValueNormalizer | NoValueNorm, p: PPOConfig) -> tuple[Batch, float]:
    """A collected rollout as one training batch, and the explained variance of its returns by its values.

    GAE runs in the returns' units: the head's values (T, N) were given in the value statistics of before
    this rollout (without ppo.value_norm: the returns' units). A time-out ends the return, as in GLAM and
    BabyAI, unless ppo.bootstrap_truncation continues it from V(final observation). The returns then enter
    the statistics (on every rank alike), and the batch carries them in the head's new units as the value
    loss's targets, with the head's own outputs at collection as the centre of its clip band
    (glamrl/rl/value_norm.py says why).

    ppo.advantage=batch_baseline reads no value (`next_value` None): the advantages are the returns-to-go within
    the rollout, every episode ended by a time-out too and one still running bootstrapped with 0, less the mean
    return of all ranks' rollouts; the explained variance is nan.
    """
    if p.advantage == "batch_baseline":
        returns = discounted_returns(buffer.rewards, buffer.terminated | buffer.truncated, p.gamma)   # (T, N)
        baseline = torch.cat(distributed.gather_objects(returns.reshape(-1))).mean()
        return buffer.flatten(returns - baseline, returns), float("nan")
    values = value_norm.denormalize(buffer.values)                                      # (T, N)
    ended = buffer.terminated if p.bootstrap_truncation else buffer.terminated | buffer.truncated
    advantages, returns = compute_gae(buffer.rewards, values, ended, buffer.truncated,
                                      value_norm.denormalize(buffer.final_values), value_norm.denormalize(next_value),
                                      p.gamma, p.gae_lambda)
    explained = explained_variance(returns, values)
    value_norm.update(torch.cat(distributed.gather_objects(returns)))
    return buffer.flatten(advantages, value_norm.normalize(returns)), explained


def critic_ceiling(buffer: RolloutBuffer, returns: torch.Tensor) -> float:
    """The explained variance that the best critic of the policy's inputs could reach on all ranks' rollouts:
    `glamrl.stats.explainable_variance` of the returns (T * N,), step-major, keyed by each frame's input (its
    prompt; with model.critic_reads_step, its prompt and step count), one frame per (input, episode). An episode
    is an env's run of steps between two ends within the rollout. The returns may be in any affine units (the
    head's normalised ones or the returns'): the ceiling does not change. nan for inputs that are not prompts
    (the symbolic agent's carry its LSTM state, which never repeats) or where fewer than `MIN_REPEATS` frames
    repeat an input across episodes, too few to estimate it from (one-observation prompts on GoToLocal).
    """
    T, N = buffer.values.shape
    inputs = [x for row in buffer.inputs for x in row]                                       # (T * N,)
    if not all(isinstance(x, str | TimedPrompt) for x in inputs):
        return float("nan")
    done = (buffer.terminated | buffer.truncated).long()
    ended_before = torch.cat([torch.zeros(1, N, dtype=torch.long), done[:-1].cumsum(0)])    # (T, N)
    rank = distributed.current().rank
    episodes = [(rank, n, int(k)) for row in ended_before.tolist() for n, k in enumerate(row)]
    return explainable_variance(distributed.gather_lists(inputs), distributed.gather_lists(returns.tolist()),
                                distributed.gather_lists(episodes), min_repeats=MIN_REPEATS)


@torch.no_grad()  # not inference mode: the buffer is written in place by the next rollout
def standardize_value_head(policy: LLMPolicy, buffer: RolloutBuffer,
                           final_inputs: list[tuple[int, np.ndarray, list[Any]]]) -> None:
    """model.value_head_init=standardized: the head's first layer from the first rollout's states (rank 0's on
    every rank), then that rollout's values, those of its bootstrapped time-outs included, from the new head."""
    T, N = buffer.values.shape
    policy.standardize_value_head([x for row in buffer.inputs for x in row])
    distributed.broadcast_parameters(policy.value_head)
    buffer.values = policy.values([x for row in buffer.inputs for x in row]).float().cpu().reshape(T, N)
    for t, cut, inputs in final_inputs:
        buffer.final_values[t, cut] = policy.values(inputs).float().cpu()


def diverged(policy: ActorCriticNetwork, batch: Batch, action_names: tuple[str, ...], params: list[torch.Tensor],
             probe: int = 8) -> bool:
    """Whether an update left non-finite weights, or a policy whose probabilities or values on the rollout's
    first `probe` frames are not finite (a finite loss can still step the weights to where the logits overflow).
    Decided by all ranks together (a sharded rank checks its own shard)."""
    with torch.no_grad():
        out = policy(batch.inputs[:probe], action_names)
        finite = all(bool(torch.isfinite(w).all()) for w in params) and bool(
            torch.isfinite(out.log_probs).all() and torch.isfinite(out.values).all())
    return distributed.average(torch.tensor([0.0 if finite else 1.0], dtype=torch.float64)).item() > 0


def set_learning_rates(optimizer: torch.optim.Optimizer, set_lrs: list[float], p: PPOConfig, frames: int) -> float:
    """Set each parameter group's learning rate for the update that starts after `frames` frames: its configured
    rate `set_lrs`, times 1 - frames / ppo.total_frames with ppo.anneal_lr (CleanRL's linear schedule, counted in
    frames, so that it does not depend on the number of envs or ranks). Returns ppo.lr's rate, for the log."""
    scale = 1 - frames / p.total_frames if p.anneal_lr else 1.0
    for group, lr in zip(optimizer.param_groups, set_lrs, strict=True):
        group["lr"] = lr * scale
    return optimizer.param_groups[0]["lr"]


def parameter_groups(policy: ActorCriticNetwork, p: PPOConfig) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: everything trainable at ppo.lr, the value head at ppo.value_lr if set."""
    params = [w for w in policy.parameters() if w.requires_grad]
    if p.value_lr is None:
        return [{"params": params, "lr": p.lr}]
    value = {id(w) for w in policy.value_parameters()}
    return [{"params": [w for w in params if id(w) not in value], "lr": p.lr},
            {"params": [w for w in params if id(w) in value], "lr": p.value_lr}]


def explained_variance(returns: torch.Tensor, values: torch.Tensor) -> float:
    """1 - Var(G - V) / Var(G) over all ranks' rollouts, in the returns' units; nan when Var(G) is 0."""
    y = torch.cat(distributed.gather_objects(returns.reshape(-1)))
    v = torch.cat(distributed.gather_objects(values.reshape(-1)))
    return float(1 - (y - v).var() / y.var()) if y.var() > 0 else float("nan")


