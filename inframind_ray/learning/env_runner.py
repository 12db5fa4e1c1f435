"""An RLlib EnvRunner for the twin env whose cost does not grow with the episode.

RLlib's ``MultiAgentEnvRunner`` walks every agent of the ongoing ``MultiAgentEpisode`` at every
env step (done checks, validation, connector passes): with one agent per decision and thousands
of decisions per episode, sampling slows down as the episode goes on (measured in
docs/learning.md, "Training throughput"). This runner keeps RLlib's modules, weights sync,
metrics and episode type, but drives the env through its batch interface
(``TwinOrchestrationEnv.pending_obs`` / ``answer`` / ``take_queries``):

- every step, one forward pass per module over all pending decisions of all sub-simulations
  (explore: a sample of the masked categorical; else its argmax), the same action distribution
  RLlib's ``GetActions`` connector samples from;
- every finished query becomes one small ``MultiAgentEpisode``: its decisions are the agents,
  each with its observation, action, log-probability, logits, reward and infos, terminated. An
  agent acts once and is rewarded when its query ends, so this is the same per-agent data the
  default runner records; only its grouping into episodes differs (PPO's GAE, with gamma =
  lambda = 1, gives each decision ``reward - V(obs)`` either way).

``sample`` returns the queries finished until at least ``num_timesteps`` decisions are in them
(queries still in flight carry over to the next call) or, with ``num_episodes``, those of that
many whole env episodes. Decisions are counted as agent steps (``count_steps_by="agent_steps"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.utils.metrics import (
    EPISODE_LEN_MEAN,
    EPISODE_MODULE_RETURN_MEAN,
    EPISODE_RETURN_MEAN,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
    WEIGHTS_SEQ_NO,
)

from inframind_ray.learning.heap import settle
from inframind_ray.learning.modules import module_of

DECISIONS = "num_decisions_sampled_lifetime"
"""Metric key: decisions sampled (agent steps of finished queries), lifetime."""
ANSWERED = "num_decisions_answered_lifetime"
"""Metric key: decisions the envs answered (finished queries or not), lifetime."""


def one_step_episode(rows: dict[str, tuple[dict, float, dict]], mapping_fn,
                     weights_seq_no: int) -> MultiAgentEpisode:
    """A finished query (agent id -> (sampling outputs ``obs``/``action``/``logp``/``logits``,
    reward, info)) as a terminated one-step multi-agent episode."""
    # no spaces: RLlib's per-agent space bookkeeping would cost more than the rest here
    ep = MultiAgentEpisode(agent_to_module_mapping_fn=mapping_fn)
    ep.add_env_reset(observations={a: d["obs"] for a, (d, _, _) in rows.items()},
                     infos={a: {} for a in rows})
    ep.add_env_step(
        observations={a: d["obs"] for a, (d, _, _) in rows.items()},
        actions={a: d["action"] for a, (d, _, _) in rows.items()},
        rewards={a: r for a, (_, r, _) in rows.items()},
        infos={a: info for a, (_, _, info) in rows.items()},
        terminateds={**{a: True for a in rows}, "__all__": True},
        extra_model_outputs={a: {Columns.ACTION_LOGP: np.float32(d["logp"]),
                                 Columns.ACTION_DIST_INPUTS: d["logits"],
                                 WEIGHTS_SEQ_NO: weights_seq_no}
                             for a, (d, _, _) in rows.items()})
    return ep


@dataclass
class QueryRows:
    """Finished queries' decisions as columns: per module, every observation key, the
    actions, log-probabilities and logits stacked in one array each; per decision its agent
    id, reward and info, in query order. Pickles as a few large arrays instead of thousands of
    small objects (learning/overlap.py sends it between processes)."""

    agents: list[str]
    bounds: list[int]
    """Query q's decisions are ``agents[bounds[q]:bounds[q + 1]]``."""
    index: list[int]
    """Each decision's row in its module's arrays."""
    columns: dict[str, dict[str, np.ndarray]]
    rewards: list[float]
    infos: list[dict]
    weights_seq_no: int

    @classmethod
    def pack(cls, records: list[dict], weights_seq_no: int) -> QueryRows:
        """From ``DecisionEnvRunner._run``'s records."""
        agents: list[str] = []
        bounds, index, rewards, infos = [0], [], [], []
        per_module: dict[str, list[dict]] = {}
        for rows in records:
            for aid, (d, r, info) in rows.items():
                bucket = per_module.setdefault(module_of(aid), [])
                agents.append(aid)
                index.append(len(bucket))
                bucket.append(d)
                rewards.append(r)
                infos.append(info)
            bounds.append(len(agents))
        columns = {}
        for mid, ds in per_module.items():
            cols = {f"obs/{k}": np.stack([d["obs"][k] for d in ds]) for k in ds[0]["obs"]}
            cols["action"] = np.array([d["action"] for d in ds], dtype=np.int64)
            cols["logp"] = np.array([d["logp"] for d in ds], dtype=np.float32)
            cols["logits"] = np.stack([d["logits"] for d in ds])
            columns[mid] = cols
        return cls(agents, bounds, index, columns, rewards, infos, weights_seq_no)

    def __len__(self) -> int:
        return len(self.agents)

    def _rows(self, q: int) -> dict[str, tuple[dict, float, dict]]:
        out = {}
        for j in range(self.bounds[q], self.bounds[q + 1]):
            aid, i = self.agents[j], self.index[j]
            cols = self.columns[module_of(aid)]
            d = {"obs": {k[4:]: v[i] for k, v in cols.items() if k.startswith("obs/")},
                 "action": int(cols["action"][i]), "logp": float(cols["logp"][i]),
                 "logits": cols["logits"][i]}
            out[aid] = (d, self.rewards[j], self.infos[j])
        return out

    def episodes(self, mapping_fn) -> list[MultiAgentEpisode]:
        """One terminated one-step episode per query, as ``DecisionEnvRunner.sample``'s."""
        return [one_step_episode(self._rows(q), mapping_fn, self.weights_seq_no)
                for q in range(len(self.bounds) - 1)]

    def summaries(self) -> list[dict[str, list]]:
        """Per query, module id -> [decisions, return] (the runner's episode metrics)."""
        out = []
        for q in range(len(self.bounds) - 1):
            s: dict[str, list] = {}
            for j in range(self.bounds[q], self.bounds[q + 1]):
                c = s.setdefault(module_of(self.agents[j]), [0, 0.0])
                c[0] += 1
                c[1] += self.rewards[j]
            out.append(s)
        return out


class DecisionEnvRunner(MultiAgentEnvRunner):
    """See the module docstring."""

    returned = 0
    """Decisions handed to the learner (in finished queries) over the runner's life: the
    ``DECISIONS`` metric's count, readable between ``train()`` calls without reducing metrics."""
    _settled = False

    def _twin_envs(self) -> list:
        if not self._settled:  # the envs and modules exist now: settle the collector once
            settle()
            self._settled = True
        envs = [e.unwrapped for e in self.env.envs]
        for e in envs:
            e.by_query = True
        return envs

    def sample(self, *, num_timesteps: int | None = None, num_episodes: int | None = None,
               explore: bool | None = None, random_actions: bool = False,
               force_reset: bool = False) -> list[MultiAgentEpisode]:
        """Finished queries as episodes (see the module docstring), with one torch thread:
        the batched forward passes are small, and more threads only spin (docs/learning.md,
        "Training throughput"); the learner's update keeps ``ppo.torch_threads``."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._sample(num_timesteps, num_episodes, explore, random_actions,
                                force_reset)
        finally:
            torch.set_num_threads(threads)

    def _sample(self, num_timesteps: int | None, num_episodes: int | None,
                explore: bool | None, random_actions: bool,
                force_reset: bool) -> list[MultiAgentEpisode]:
        explore = self.config.explore if explore is None else explore
        envs = self._twin_envs()
        if num_timesteps is None and num_episodes is None:
            num_timesteps = self.config.get_rollout_fragment_length(self.worker_index) * len(envs)
        if force_reset or num_episodes is not None or self._needs_initial_reset:
            self._reset(envs)
        records, env_steps, ended, answered = self._run(envs, num_timesteps, num_episodes,
                                                        explore, random_actions)
        out = [self._episode(rows) for rows in records]
        self._log_sampled(out, env_steps, ended, answered)
        return out

    def sample_rows(self, *, num_timesteps: int) -> QueryRows:
        """As ``sample(num_timesteps=...)`` (exploring), but the finished queries come as
        columns (``QueryRows``), which cross a process boundary several times faster than
        episodes; ``QueryRows.episodes`` builds the episodes where they are learned from."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            envs = self._twin_envs()
            if self._needs_initial_reset:
                self._reset(envs)
            records, env_steps, ended, answered = self._run(envs, num_timesteps, None,
                                                            self.config.explore, False)
            rows = QueryRows.pack(records, self._weights_seq_no)
            self._log_summaries(rows.summaries(), env_steps, ended, answered)
            return rows
        finally:
            torch.set_num_threads(threads)

    def _run(self, envs: list, num_timesteps: int | None, num_episodes: int | None,
             explore: bool, random_actions: bool) -> tuple[list[dict], int, int, int]:
        """Step the envs until enough decisions (or env episodes) have finished; the finished
        queries' records (agent id -> sampling outputs, reward, info), env steps, episodes
        ended, decisions answered."""
        records: list[dict] = []
        decisions = env_steps = ended = answered = 0
        while (ended < num_episodes) if num_episodes is not None else decisions < num_timesteps:
            asks = [(k, aid, o) for k, e in enumerate(envs) for aid, o in e.pending_obs()]
            if asks:
                acts = self._act(asks, explore, random_actions)
                answered += len(acts)
                for k, e in enumerate(envs):
                    e.answer({aid: a for (kk, aid, _), a in zip(asks, acts, strict=True)
                              if kk == k})
                env_steps += 1
            for k, e in enumerate(envs):
                for query in e.take_queries():
                    rows = {aid: (self._open.pop((k, aid)), r, info)
                            for aid, (r, info) in query.items() if (k, aid) in self._open}
                    if rows:
                        records.append(rows)
                        decisions += len(rows)
                if e.done:
                    ended += 1
                    e.reset()
        self.returned += decisions
        if num_episodes is not None:
            self._needs_initial_reset = True
        return records, env_steps, ended, answered

    # ------------------------------------------------------------------ internals
    def _reset(self, envs: list) -> None:
        seed = self._seed if self._needs_initial_reset else None
        for k, e in enumerate(envs):
            e.reset(seed=None if seed is None else seed + k)
        self._open: dict[tuple[int, str], dict] = {}  # (env, agent) -> obs, sampling outputs
        self._needs_initial_reset = False

    def _act(self, asks: list[tuple[int, str, dict]], explore: bool, random_actions: bool
             ) -> list[int]:
        """One forward pass per module over the pending decisions; their actions."""
        acts = [0] * len(asks)
        by_module: dict[str, list[int]] = {}
        for i, (_, aid, _) in enumerate(asks):
            by_module.setdefault(module_of(aid), []).append(i)
        for mid, idx in by_module.items():
            module = self.module[mid]
            obs = {key: torch.from_numpy(np.stack([asks[i][2][key] for i in idx]))
                   for key in asks[idx[0]][2]}
            with torch.no_grad():
                if random_actions:
                    logits = torch.where(obs["mask"] > 0, 0.0, -1e9)
                elif explore:
                    logits = module.forward_exploration({Columns.OBS: obs})[
                        Columns.ACTION_DIST_INPUTS]
                else:
                    logits = module.forward_inference({Columns.OBS: obs})[
                        Columns.ACTION_DIST_INPUTS]
                dist_cls = (module.get_exploration_action_dist_cls() if explore
                            else module.get_inference_action_dist_cls())
                dist = dist_cls.from_logits(logits)
                a = dist.sample() if explore or random_actions else logits.argmax(-1)
                logp = dist.logp(a)
            for j, i in enumerate(idx):
                k, aid, o = asks[i]
                acts[i] = int(a[j])
                self._open[(k, aid)] = {"obs": o, "action": acts[i], "logp": float(logp[j]),
                                        "logits": logits[j].numpy()}
        return acts

    def _episode(self, rows: dict[str, tuple[dict, float, dict]]) -> MultiAgentEpisode:
        """One finished query as a terminated one-step multi-agent episode."""
        ep = one_step_episode(rows, self.config.policy_mapping_fn, self._weights_seq_no)
        return ep.to_numpy() if self.episodes_to_numpy else ep

    def _log_sampled(self, episodes: list[MultiAgentEpisode], env_steps: int, ended: int,
                     answered: int | None = None) -> None:
        summaries = []
        for e in episodes:
            s: dict[str, list] = {}
            for sa in e.agent_episodes.values():
                c = s.setdefault(sa.module_id, [0, 0.0])
                c[0] += len(sa)
                c[1] += sa.get_return()
            summaries.append(s)
        self._log_summaries(summaries, env_steps, ended, answered)

    def _log_summaries(self, summaries: list[dict[str, list]], env_steps: int, ended: int,
                       answered: int | None = None) -> None:
        """Log a sample call's metrics; ``summaries``: per finished query, module id ->
        [agent steps, return]."""
        m = self.metrics
        if answered is not None:
            m.log_value(ANSWERED, answered, reduce="lifetime_sum")
        n = sum(c[0] for s in summaries for c in s.values())
        m.log_value(NUM_ENV_STEPS_SAMPLED, env_steps, reduce="sum")
        m.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, env_steps, reduce="lifetime_sum")
        m.log_value(DECISIONS, n, reduce="lifetime_sum")
        m.log_value(NUM_EPISODES, ended, reduce="sum")
        m.log_value(NUM_EPISODES_LIFETIME, ended, reduce="lifetime_sum")
        per_module: dict[str, int] = {}
        win = max(1, self.config.metrics_num_episodes_for_smoothing)
        for s in summaries:
            ret = {mid: c[1] for mid, c in s.items()}
            for mid, c in s.items():
                per_module[mid] = per_module.get(mid, 0) + c[0]
            m.log_dict({EPISODE_RETURN_MEAN: sum(ret.values()),
                        EPISODE_LEN_MEAN: sum(c[0] for c in s.values()),
                        EPISODE_MODULE_RETURN_MEAN: ret}, window=win)
        for mid, k in per_module.items():  # agent steps per module, not per agent id: the
            # ids number in the thousands and RLlib only ever sums these
            m.log_value((NUM_AGENT_STEPS_SAMPLED, mid), k, reduce="sum")
            m.log_value((NUM_AGENT_STEPS_SAMPLED_LIFETIME, mid), k, reduce="lifetime_sum")
            m.log_value((NUM_MODULE_STEPS_SAMPLED, mid), k, reduce="sum")
            m.log_value((NUM_MODULE_STEPS_SAMPLED_LIFETIME, mid), k, reduce="lifetime_sum")

    def get_metrics(self) -> dict[str, Any]:
        """This runner's reduced metrics (per-query episode metrics are logged in ``sample``)."""
        return self.metrics.reduce()
