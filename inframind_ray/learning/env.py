"""An RLlib ``MultiAgentEnv`` over the twin, with many queries in flight at once.

Every decision is an agent that acts exactly once: ``plan/<s>/<n>`` (the planner of query n of
sub-simulation s) and ``step/<s>/<n>/<node>`` (the executor at one node of its DAG). Agents are
terminated, with their own reward, when their query ends. An env runs ``num_sims`` independent
episodes side by side (``SubSim``, learning/subsim.py), each on its own simulated loop driven in
the env's own thread: a loop runs until its next decision is pending and simulated time stands
still while the learner thinks. Every ``step`` answers the pending decision of every
sub-simulation at once (one batched forward pass in RLlib) and the env ends when all of them have.

Reward (quality first, LAMaS credit): ``quality - lam * cost * w`` where quality is 1 for a correct
answer within budget, cost is the lateness ``min(1, max(0, latency / budget - 1))`` (1 when the
query was aborted at its deadline) and ``w`` is 1 for the planner and ``l(o) / T`` for a node o
(nodes on the longest path through o over the critical path). With ``congestion_toll`` every
call dispatched to a model with no free slot also pays a toll per slot-second it held, and with
``delay_price`` every call pays for the delay it added to the requests beside it (the planner
pays its query's tolls; with ``delay_price_window_s`` the price is measured in the episode).
``infos`` carry quality, cost, weight, baseline and toll.

Per episode the env also draws the metric age policies see (``metrics_periods``) and whether
the pool starts with a history of past latencies (``history_fraction``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from inframind_ray import assumptions as A
from inframind_ray.config import PoolConfig, load_pool
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import build_graph
from inframind_ray.core.types import PoolInfo, TokenBudget
from inframind_ray.learning.pools_draw import PoolSource, capacity_rpm
from inframind_ray.learning.subsim import Episode, SimPool, SubSim, start_pool
from inframind_ray.orchestration.runner import AgentResult, QueryResult
from inframind_ray.policy.features import EXECUTOR_OBS, MAX_MODELS, PLANNER_OBS, FeatureBuilder
from inframind_ray.policy.latency import free_slots
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.registry import parse_mix
from inframind_ray.tasks.workload import WorkloadSpec
from inframind_ray.twin.outcome import OutcomeModel

__all__ = ["EnvConfig", "Episode", "RewardTerms", "SlackDensity", "TwinOrchestrationEnv",
           "start_pool"]

MAX_NODES = 9  # Debate(K=4, 2 rounds) + aggregator
TOLL_CAP = 0.5  # a call's toll never exceeds this: a correct answer still outranks a wrong one


class EnvConfig(BaseModel):
    """Episode randomisation and reward settings (validated)."""

    model_config = ConfigDict(extra="forbid")
    pool: str = "default"
    pools: list[str] | Literal["sampled"] | None = None
    """Per episode (per sub-simulation) pool: None = ``pool``; a list of pool names or files,
    drawn uniformly; ``sampled``: ``pools.sampler.sample_pool`` (learning/pools_draw.py). Every
    pool must give the same observation shapes as ``pool``."""
    load_range: tuple[float, float] | None = None
    """Offered load per episode as a factor of the episode pool's capacity proxy (log-uniform;
    assumption ``LOAD_CAPACITY_PROXY``), instead of ``rate_range``."""
    num_sims: int = Field(1, ge=1, le=256)
    """Independent sub-simulations per env (each its own episode, drawn independently); every
    ``step`` answers one pending decision of each."""
    queries_per_episode: int = Field(40, ge=1, le=2000)
    rate_range: tuple[float, float] = (10.0, 300.0)
    trace_fraction: float = Field(0.2, ge=0, le=1)
    budget_ranges: list[tuple[float, float]] = [A.BUDGET_RANGE_S, (15.0, 45.0), (30.0, 120.0)]
    split: str = "train"
    tasks: str = "mmlu_pro"
    """Task families of the episodes' queries and their shares (``bench --mix`` syntax)."""
    lam: float = Field(1.0, ge=0)
    metrics_periods: list[float] = Field([0.0], min_length=1)
    """Per episode, policies read load snapshots refreshed every one of these simulated seconds
    (drawn uniformly; 0 = fresh), so the policy learns what metric age means."""
    congestion_toll: float = Field(0.0, ge=0)
    """Per slot-second: a call that runs on a model with no free slot at dispatch pays this
    for every second it holds a slot (the marginal value of a saturated model's capacity, a
    Pigouvian toll). Each decision's reward otherwise covers only its own query, and a query
    with a loose budget gains by queueing a long call that pushes tight-budget queries onto
    weaker models; the planner pays the tolls of all its query's calls."""
    delay_price: float = Field(0.0, ge=0)
    """Per second of delay a call added to the other requests running beside it (summed over
    them; the twin engine measures it, ``AgentResult.imposed_s``): the call pays this toll at
    any load, not only on a saturated model. Without it a decision's reward carries none of
    what its calls cost other queries (longer iterations for the whole batch), and a policy
    gains by voting under load while the queries beside it go late (docs/learning.md). One
    second of delay costs a query about the density at zero of its slack (budget - latency) in
    expected goodput: the value to set (the prior, with ``delay_price_window_s``)."""
    delay_price_window_s: float = Field(0.0, ge=0)
    """If > 0 the delay price is measured, per episode, as that density: among the episode's
    queries finished so far, the share of right, in-budget answers whose slack is under this
    many seconds, over the window (``SlackDensity``); ``delay_price`` is its prior, worth
    ``SlackDensity.PRIOR_QUERIES`` queries. A fixed price is too high where a delay tips no one
    over a deadline (light load, where votes pay) and too low where many queries run close to
    theirs (the density at x1 is three times that at x0.5, docs/learning.md)."""
    history_fraction: float = Field(0.0, ge=0, le=1)
    """Share of episodes whose pool has a history: each model, with probability 3/4, starts with
    latency EWMAs as if it had served load before (``pool_history``). Without it the models a
    policy leaves idle always report zero latency in training, and a served pool, where every
    model has served something, is out of distribution."""
    token_budget: TokenBudget = True
    """The policy caps DeepThink calls at each model's token budget (``Policy.token_budget``,
    policy/base.py) and its price list expects the capped lengths: ``true`` on every task family,
    ``tail`` only where the answers it cuts are mostly wrong (``TaskCard.budget``)."""
    deadlines: bool = True
    """False: the budget-free workload (``bench --no-deadlines``): calls carry no deadline, so no
    queue sheds and nothing aborts a late call; the reward still reads the query's budget (a late
    answer earns no quality and pays the lateness cost, but it can be right: accuracy and goodput
    differ). The validation runs use the same setting."""
    counterfactual_baseline: bool = False
    """Subtract from every decision's reward whether the strongest model alone (DeepThink) answers
    the item right, read from the recorded answers (``reward_terms``). It does not depend on
    the action, so the policy gradient stays unbiased; it takes the item-difficulty variance out
    of the advantage. The policy never sees it: it is training-time information only."""


def query_terms(res: QueryResult, outcome: OutcomeModel) -> tuple[float, float, dict[str, float]]:
    """(quality, lateness cost, LAMaS weight per executed node) of a finished query: quality 1
    for a correct answer within budget; cost ``min(1, latency/budget - 1)``, 1 when aborted;
    weight ``l(o)/T`` (longest path through the node over the critical path)."""
    q = res.query
    quality = float(res.within_budget and query_correct(res, outcome))
    late = min(1.0, max(0.0, res.latency / q.budget_s - 1.0))
    cost = late if res.status.ok else 1.0  # not answered (deadline, shed, overloaded): full cost
    graph = build_graph(res.plan)
    return quality, cost, {s.node_id: graph.path_through(s.node_id) / graph.critical_path_len
                           for s in res.steps}


def query_correct(res: QueryResult, outcome: OutcomeModel) -> bool:
    """The query was answered right, however late (the accuracy floor's measure)."""
    q = res.query
    return res.status.ok and outcome.is_correct(q.item_id, res.answer, q.task)


def slot_seconds(s: AgentResult) -> float:
    """Seconds a call held a sequence slot: first token to end (its prefill is a few ms)."""
    return max(0.0, s.end - s.first_token) if s.first_token is not None else 0.0


@dataclass
class SlackDensity:
    """The delay price measured in one episode: the density at zero of the slack (budget -
    latency) of its right, in-budget answers, over ``[0, window_s)``, among the queries
    finished so far, with a prior (``price``) worth ``PRIOR_QUERIES`` queries."""

    prior: float
    window_s: float
    near: int = 0  # right, in-budget answers with slack under window_s
    n: int = 0  # queries finished

    PRIOR_QUERIES = 50  # the prior's weight: the price is mostly measured after ~50 queries

    def price(self) -> float:
        """What one second of added delay costs a query now, in expected goodput."""
        k = self.PRIOR_QUERIES
        return (k * self.prior + self.near / self.window_s) / (k + self.n)

    def observe(self, slack_s: float, quality: float) -> None:
        """Count a finished query: its budget minus its latency, and its quality (1: right and
        in budget)."""
        self.n += 1
        self.near += quality > 0 and slack_s < self.window_s


@dataclass(frozen=True)
class RewardTerms:
    """What a finished query gives each of its decisions: ``quality - baseline - lam * cost *
    weight - toll``, the planner with weight 1 and every call's toll."""

    quality: float
    baseline: float
    cost: float
    weight: dict[int, float]  # LAMaS l(o)/T per executed node
    toll: dict[int, float]  # congestion toll per node (absent: none)
    correct: float = 0.0  # answered right, however late: the accuracy floor's measure

    def weight_of(self, node: int | None) -> float:
        """A node's LAMaS weight; the planner's (node None) is 1."""
        return 1.0 if node is None else self.weight[node]

    def toll_of(self, node: int | None) -> float:
        """A node's toll; the planner's (node None) is the sum over its query's calls."""
        return sum(self.toll.values()) if node is None else self.toll.get(node, 0.0)

    def infos(self, node: int | None) -> dict[str, float]:
        """A decision's terminal infos (what ``LagrangianReward`` rewrites the reward from)."""
        return {"quality": self.quality, "cost": self.cost, "weight": self.weight_of(node),
                "baseline": self.baseline, "toll": self.toll_of(node), "correct": self.correct}

    def reward(self, node: int | None, lam: float) -> float:
        """The reward of the planner (node None) or of one executor node."""
        return (self.quality - self.baseline - lam * self.cost * self.weight_of(node)
                - self.toll_of(node))


class TwinOrchestrationEnv(MultiAgentEnv):
    """See the module docstring."""

    def __init__(self, config: dict | None = None, pool: PoolConfig | None = None) -> None:
        self._live: dict[str, None] = {}  # agents that acted and wait for their reward
        super().__init__()
        self.cfg = EnvConfig.model_validate(config or {})
        self.pool = pool or load_pool(self.cfg.pool)  # ``pool``: another pool than cfg.pool
        self.outcome = OutcomeModel.for_models(self.pool.models)
        self.info = build_pool_info(self.pool)
        self.features = f = FeatureBuilder(self.info, self.cfg.token_budget)
        self.sim_pool = SimPool(self.pool, self.info, self.outcome, f)
        n = self.cfg.queries_per_episode
        box = lambda d: gym.spaces.Box(-np.inf, np.inf, (d,), np.float32)  # noqa: E731
        mask = lambda d: gym.spaces.Box(0.0, 1.0, (d,), np.float32)  # noqa: E731
        masks = ("mask", "row_mask")  # fixed shapes (MAX_MODELS rows) whatever the pool
        self.plan_space = gym.spaces.Dict({k: (mask if k in masks else box)(d)
                                           for k, d in PLANNER_OBS.items()})
        self.exec_space = gym.spaces.Dict({k: (mask if k in masks else box)(d)
                                           for k, d in EXECUTOR_OBS.items()})
        self.possible_agents = [
            a for s in range(self.cfg.num_sims) for i in range(n)
            for a in (f"plan/{s}/{i}", *(f"step/{s}/{i}/{j}" for j in range(MAX_NODES)))]
        self.observation_spaces = {a: self.plan_space if a.startswith("plan") else self.exec_space
                                   for a in self.possible_agents}
        plan_act, exec_act = gym.spaces.Discrete(f.n_plan), gym.spaces.Discrete(f.n_exec)
        self.action_spaces = {a: plan_act if a.startswith("plan") else exec_act
                              for a in self.possible_agents}
        self.pool_source = PoolSource(self.sim_pool, self.cfg.pools, self.cfg.token_budget,
                                      self._misfit)
        self.sims: list[SubSim] = []
        self._density: list[SlackDensity | None] = []  # per sub-simulation (reset)
        self._last_obs: dict[str, dict] = {}
        self._finished: dict[str, tuple[float, dict]] = {}  # rewarded, not yet emitted
        self._resets = 0
        self._seed_base: int | None = None
        self.episode_stats: list[dict] = []
        self.decisions = 0  # answered over the env's life (the throughput benchmark reads it)
        self.by_query = False
        """Set by ``DecisionEnvRunner``: finished queries go to ``take_queries`` instead of the
        ``step`` protocol's terminations."""
        self._queries: list[dict[str, tuple[float, dict]]] = []

    @property
    def agents(self) -> list[str]:
        """Agents that have acted and are not terminated yet."""
        return list(self._live)

    @agents.setter
    def agents(self, value: list[str]) -> None:
        self._live = dict.fromkeys(value)

    @property
    def pending(self) -> list[str]:
        """The decisions the env waits for (at most one per sub-simulation)."""
        return [s.pending[0] for s in self.sims if s.pending is not None]

    def pending_obs(self) -> list[tuple[str, dict]]:
        """(agent id, observation) of every pending decision."""
        return [s.pending for s in self.sims if s.pending is not None]

    def answer(self, actions: dict[str, int]) -> None:
        """Answer pending decisions (``by_query`` mode: no step results are built)."""
        for s in self.sims:
            if s.pending is not None and s.pending[0] in actions:
                s.answer(int(actions[s.pending[0]]))
                self.decisions += 1
        for s in self.sims:
            for res in s.take_results():
                self._reward(s, res)

    def take_queries(self) -> list[dict[str, tuple[float, dict]]]:
        """(``by_query`` mode) per query finished since the last call, its decisions' (reward,
        infos) by agent id."""
        out, self._queries = self._queries, []
        return out

    @property
    def done(self) -> bool:
        """Every sub-simulation's episode has ended."""
        return all(s.done for s in self.sims)

    # ------------------------------------------------------------------ episode
    def _misfit(self, pool: SimPool) -> str | None:
        """Why ``pool``'s observations do not fit this env's spaces (None if they do): the
        per-model-row features fit any pool of at most ``MAX_MODELS`` models."""
        n = len(pool.info.models)
        return None if n <= MAX_MODELS else f"{n} models, more than {MAX_MODELS}"

    def sample_episode(self, rng: np.random.Generator, pool: SimPool | None = None) -> Episode:
        """Random rate (or load factor of ``pool``'s capacity), arrivals, budgets, metric age
        and pool history."""
        if self.cfg.load_range is not None:
            lo, hi = self.cfg.load_range
            cap = capacity_rpm((pool or self.sim_pool).info, parse_mix(self.cfg.tasks))
            lo, hi = lo * cap, hi * cap
        else:
            lo, hi = self.cfg.rate_range
        rate = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
        arrivals = "trace:azure_conv" if rng.random() < self.cfg.trace_fraction else "poisson"
        budget = self.cfg.budget_ranges[int(rng.integers(len(self.cfg.budget_ranges)))]
        spec = WorkloadSpec(rate, self.cfg.queries_per_episode, arrivals, self.cfg.split,
                            tuple(budget), int(rng.integers(2**31)),
                            tuple(parse_mix(self.cfg.tasks).items()))
        period = float(self.cfg.metrics_periods[int(rng.integers(len(self.cfg.metrics_periods)))])
        history = int(rng.integers(2**31)) if rng.random() < self.cfg.history_fraction else None
        return Episode(spec, period, history, self.cfg.deadlines)

    def _episode_rng(self, sim: int) -> np.random.Generator:
        """Sub-simulation ``sim``'s draws at this reset (sub-simulation 0 as a one-sim env)."""
        if self._seed_base is None:
            return np.random.default_rng()
        return np.random.default_rng([self._seed_base, self._resets] + ([sim] if sim else []))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new episode in every sub-simulation (random rate, arrivals and budgets)."""
        self.close()
        if seed is not None:  # RLlib may pass the same seed at every reset: vary by episode
            self._seed_base = seed
        self._resets += 1
        self.sims, self.episode_stats = [], []
        for i in range(self.cfg.num_sims):
            rng = self._episode_rng(i)
            pool = self.pool_source.draw(rng)
            ep = self.sample_episode(rng, pool)
            spec = ep.workload
            self.episode_stats.append({"pool": pool.config.name,
                "rate_per_min": spec.rate_per_min, "arrivals": spec.arrivals,
                "budget_range_s": spec.budget_range_s, "metrics_period_s": ep.metrics_period_s,
                "history": ep.history_seed is not None, "goodput": 0.0, "queries_done": 0})
            self.sims.append(SubSim(i, pool, ep, self.cfg.token_budget))
        self._live, self._last_obs, self._finished, self._queries = {}, {}, {}, []
        self._density = [self.slack_density() for _ in self.sims]
        for s in self.sims:
            s.advance()
        obs, _, _, _, infos = self._collect()
        return obs, infos

    def step(self, action_dict: dict):
        """Answer every pending decision; run each sub-simulation until its next one."""
        for s in self.sims:
            if s.pending is None:
                continue
            aid = s.pending[0]
            if aid not in action_dict:
                raise ValueError(f"expected an action for {aid!r}")
            s.answer(int(action_dict[aid]))
            self.decisions += 1
        return self._collect()

    # ------------------------------------------------------------------ plumbing
    def _collect(self):
        obs, rewards, terms, infos = {}, {}, {}, {}
        for s in self.sims:
            for res in s.take_results():
                self._reward(s, res)
        asks = [s.pending for s in self.sims if s.pending is not None]
        if asks:
            # RLlib ends a multi-agent episode when every agent seen so far is done; when
            # the pools run empty between queries, hold one finished agent back a step
            held = [] if any(a not in self._finished for a in self._live) else \
                list(self._finished)[-1:]
            self._emit(obs, rewards, terms, infos, keep=held)
            for aid, o in asks:
                self._last_obs[aid] = o
                self._live[aid] = None
                obs[aid] = o
                infos.setdefault(aid, {})
            terms["__all__"] = False
        else:
            self._emit(obs, rewards, terms, infos, keep=[])
            terms["__all__"] = True  # every sub-simulation has ended
        return obs, rewards, terms, {"__all__": False}, infos

    def _emit(self, obs, rewards, terms, infos, keep: list[str]) -> None:
        """Terminate finished agents (their final obs, reward and infos), except ``keep``."""
        for aid in [a for a in self._finished if a not in keep]:
            reward, info = self._finished.pop(aid)
            obs[aid] = self._last_obs.pop(aid)
            rewards[aid] = reward
            terms[aid] = True
            infos[aid] = info
            del self._live[aid]

    def slack_density(self) -> SlackDensity | None:
        """A fresh episode's measured delay price (None: ``delay_price`` is fixed)."""
        w = self.cfg.delay_price_window_s
        return SlackDensity(self.cfg.delay_price, w) if w > 0 else None

    def reward_terms(self, res: QueryResult, pool: SimPool | None = None,
                     density: SlackDensity | None = None) -> RewardTerms:
        """The terms of every decision's reward of a finished query (``RewardTerms.reward``)
        on ``pool`` (default: the config's). The baseline is 0 unless
        ``counterfactual_baseline``: then 1 if the strongest model alone, step by step, answers
        the item right (whatever the load). Tolls are 0 unless ``congestion_toll`` or
        ``delay_price``. ``density``: the episode's measured delay price, which then counts
        this query (call in the order the queries finish)."""
        pool = pool or self.sim_pool
        quality, cost, node_w = query_terms(res, pool.outcome)
        base = (float(pool.outcome.would_be_correct(res.query.item_id, pool.info.strongest,
                                                    Strategy.DEEPTHINK, res.query.task,
                                                    res.query.query_id))
                if self.cfg.counterfactual_baseline else 0.0)
        price = self.cfg.delay_price if density is None else density.price()
        toll = {s.node_id: t for s in res.steps
                if (t := self.call_toll(pool.info, s, price)) > 0}
        if density is not None:
            density.observe(res.query.budget_s - res.latency, quality)
        return RewardTerms(quality, base, cost, node_w, toll,
                           float(query_correct(res, pool.outcome)))

    def call_toll(self, info: PoolInfo, s: AgentResult, delay_price: float) -> float:
        """One call's toll: ``congestion_toll`` per slot-second if its model was saturated at
        dispatch, plus ``delay_price`` per second it delayed the requests beside it; at most
        ``TOLL_CAP``."""
        jam = self.cfg.congestion_toll * slot_seconds(s) if _saturated(info, s) else 0.0
        return min(TOLL_CAP, jam + delay_price * s.imposed_s)

    def _reward(self, sim: SubSim, res: QueryResult) -> None:
        t = self.reward_terms(res, sim.pool, self._density[sim.index])
        n, i = int(res.query.query_id[1:6]), sim.index
        nodes = {f"plan/{i}/{n}": None} | {f"step/{i}/{n}/{k}": k for k in t.weight}
        if self.by_query:
            self._queries.append({aid: (t.reward(node, self.cfg.lam), t.infos(node))
                                  for aid, node in nodes.items()})
            nodes = {}
        for aid, node in nodes.items():
            if aid not in self._live or aid in self._finished:
                continue
            self._finished[aid] = (t.reward(node, self.cfg.lam), t.infos(node))
        s = self.episode_stats[i]
        s["queries_done"] += 1
        s["goodput"] += (t.quality - s["goodput"]) / s["queries_done"]

    def close(self) -> None:
        """Cancel unfinished sub-simulations."""
        for s in self.sims:
            s.close()


def _saturated(info: PoolInfo, s: AgentResult) -> bool:
    """Had the call's model no free sequence slot when the executor chose it?"""
    return s.load is not None and free_slots(info[s.model], s.load) <= 0
