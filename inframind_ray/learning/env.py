"""An RLlib ``MultiAgentEnv`` over the twin, with many queries in flight at once.

Every decision is an agent that acts exactly once: ``plan/<n>`` (the planner of query n) and
``step/<n>/<node>`` (the executor at one node of its DAG). Agents are terminated, with their own
reward, when their query ends. The simulation runs in a worker thread on the virtual clock; a
bridge policy posts each decision's observation and blocks until ``step`` brings the action, so
simulated time stands still while the learner thinks and each ``step`` answers one decision.

Reward (quality first, LAMaS credit): ``quality - lam * cost * w`` where quality is 1 for a correct
answer within budget, cost is the lateness ``min(1, max(0, latency / budget - 1))`` (1 when the
query was aborted at its deadline) and ``w`` is 1 for the planner and ``l(o) / T`` for a node o
(nodes on the longest path through o over the critical path). With ``congestion_toll`` every
call dispatched to a model with no free slot also pays a toll per slot-second it held (the
planner pays its query's tolls). ``infos`` carry quality, cost, weight, baseline and toll.

Per episode the env also draws the metric age policies see (``metrics_periods``) and whether
the pool starts with a history of past latencies (``history_fraction``).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from dataclasses import dataclass, replace

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from inframind_ray import assumptions as A
from inframind_ray.config import PoolConfig, load_pool
from inframind_ray.core.strategy import Strategy
from inframind_ray.core.topology import Plan, build_graph
from inframind_ray.core.types import PoolInfo, QueryInfo, StepContext, StepDecision, SystemState
from inframind_ray.orchestration.runner import AgentResult, QueryResult, run_query
from inframind_ray.policy.base import Policy
from inframind_ray.policy.features import EXECUTOR_OBS, PLANNER_OBS, FeatureBuilder, plan_of
from inframind_ray.policy.latency import free_slots
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.registry import parse_mix
from inframind_ray.tasks.workload import WorkloadSpec, make_queries
from inframind_ray.twin.backend import TwinBackend
from inframind_ray.twin.outcome import OutcomeModel
from inframind_ray.twin.pool import ModelReplicas, TwinLoadView, build_engines, pool_history
from inframind_ray.twin.simloop import run_simulated

MAX_NODES = 9  # Debate(K=4, 2 rounds) + aggregator
TOLL_CAP = 0.5  # a call's toll never exceeds this: a correct answer still outranks a wrong one


class EnvConfig(BaseModel):
    """Episode randomisation and reward settings (validated)."""

    model_config = ConfigDict(extra="forbid")
    pool: str = "default"
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
    history_fraction: float = Field(0.0, ge=0, le=1)
    """Share of episodes whose pool has a history: each model, with probability 3/4, starts with
    latency EWMAs as if it had served load before (``pool_history``). Without it the models a
    policy leaves idle always report zero latency in training, and a served pool, where every
    model has served something, is out of distribution."""
    token_budget: bool = True
    """The policy caps DeepThink calls at each model's token budget (``Policy.token_budget``,
    policy/base.py) and its price list expects the capped lengths."""
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
    quality = float(outcome.is_correct(q.item_id, res.answer, q.task) and res.within_budget)
    late = min(1.0, max(0.0, res.latency / q.budget_s - 1.0))
    cost = late if res.status.ok else 1.0  # not answered (deadline, shed, overloaded): full cost
    graph = build_graph(res.plan)
    return quality, cost, {s.node_id: graph.path_through(s.node_id) / graph.critical_path_len
                           for s in res.steps}


def slot_seconds(s: AgentResult) -> float:
    """Seconds a call held a sequence slot: first token to end (its prefill is a few ms)."""
    return max(0.0, s.end - s.first_token) if s.first_token is not None else 0.0


@dataclass(frozen=True)
class RewardTerms:
    """What a finished query gives each of its decisions: ``quality - baseline - lam * cost *
    weight - toll``, the planner with weight 1 and every call's toll."""

    quality: float
    baseline: float
    cost: float
    weight: dict[int, float]  # LAMaS l(o)/T per executed node
    toll: dict[int, float]  # congestion toll per node (absent: none)

    def weight_of(self, node: int | None) -> float:
        """A node's LAMaS weight; the planner's (node None) is 1."""
        return 1.0 if node is None else self.weight[node]

    def toll_of(self, node: int | None) -> float:
        """A node's toll; the planner's (node None) is the sum over its query's calls."""
        return sum(self.toll.values()) if node is None else self.toll.get(node, 0.0)

    def reward(self, node: int | None, lam: float) -> float:
        """The reward of the planner (node None) or of one executor node."""
        return (self.quality - self.baseline - lam * self.cost * self.weight_of(node)
                - self.toll_of(node))


@dataclass(frozen=True)
class Episode:
    """What one episode randomises: the workload, the metric age and the pool's history."""

    workload: WorkloadSpec
    metrics_period_s: float = 0.0
    history_seed: int | None = None  # None: a fresh pool


def start_pool(pool: PoolConfig, info: PoolInfo, ep: Episode
               ) -> tuple[dict[str, ModelReplicas], TwinLoadView]:
    """The engines of one episode and the load view its policy reads (inside a running loop)."""
    engines = build_engines(pool)
    if ep.history_seed is not None:
        pool_history(engines, info, ep.history_seed, share=0.75)
    return engines, TwinLoadView(engines, ep.metrics_period_s)


def _first_valid(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask > 0)[0])


class _Bridge(Policy):
    """Posts each decision to the env thread and waits for the action."""

    name = "rl-bridge"

    def __init__(self, env: TwinOrchestrationEnv) -> None:
        super().__init__(env.info)
        self.env = env
        self.token_budget = env.cfg.token_budget

    def _ask(self, aid: str, obs: dict) -> int:
        if self.env._draining:
            return _first_valid(obs["mask"])
        self.env._events.put(("ask", aid, obs))
        return self.env._actions.get()

    @staticmethod
    def _n(q: QueryInfo) -> int:
        return int(q.query_id[1:6])

    def _plan(self, query: QueryInfo, state: SystemState) -> Plan:
        obs = self.env.features.planner(query, state)
        return plan_of(self._ask(f"plan/{self._n(query)}", obs))

    def _decide(self, ctx: StepContext) -> StepDecision:
        obs = self.env.features.executor(ctx)
        model, strategy = self.env.features.decision(
            self._ask(f"step/{self._n(ctx.query)}/{ctx.node.id}", obs))
        return StepDecision(model, strategy)


class TwinOrchestrationEnv(MultiAgentEnv):
    """See the module docstring."""

    def __init__(self, config: dict | None = None, pool: PoolConfig | None = None) -> None:
        super().__init__()
        self.cfg = EnvConfig.model_validate(config or {})
        self.pool = pool or load_pool(self.cfg.pool)  # ``pool``: another pool than cfg.pool
        self.outcome = OutcomeModel.for_models(self.pool.models)
        self.info = build_pool_info(self.pool)
        self.features = f = FeatureBuilder(self.info, self.cfg.token_budget)
        n = self.cfg.queries_per_episode
        box = lambda d: gym.spaces.Box(-np.inf, np.inf, (d,), np.float32)  # noqa: E731
        mask = lambda d: gym.spaces.Box(0.0, 1.0, (d,), np.float32)  # noqa: E731
        masks = ("mask", "row_mask")  # fixed shapes (MAX_MODELS rows) whatever the pool
        plan_space = gym.spaces.Dict({k: (mask if k in masks else box)(d)
                                      for k, d in PLANNER_OBS.items()})
        exec_space = gym.spaces.Dict({k: (mask if k in masks else box)(d)
                                      for k, d in EXECUTOR_OBS.items()})
        self.possible_agents = [f"plan/{i}" for i in range(n)] + [
            f"step/{i}/{j}" for i in range(n) for j in range(MAX_NODES)]
        self.observation_spaces = {a: plan_space if a.startswith("plan") else exec_space
                                   for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(f.n_plan if a.startswith("plan")
                                                     else f.n_exec)
                              for a in self.possible_agents}
        self.agents = []
        self._thread: threading.Thread | None = None
        self._events: queue.Queue = queue.Queue()
        self._actions: queue.Queue = queue.Queue()
        self._draining = False
        self._pending: str | None = None
        self._last_obs: dict[str, dict] = {}
        self._finished: dict[str, tuple[float, dict]] = {}
        self._finished_order: list[str] = []
        self._resets = 0
        self._seed_base: int | None = None
        self.episode_stats: dict = {}

    # ------------------------------------------------------------------ episode
    def sample_episode(self, rng: np.random.Generator) -> Episode:
        """Random rate, arrivals, budgets, metric age and pool history."""
        lo, hi = self.cfg.rate_range
        rate = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
        arrivals = "trace:azure_conv" if rng.random() < self.cfg.trace_fraction else "poisson"
        budget = self.cfg.budget_ranges[int(rng.integers(len(self.cfg.budget_ranges)))]
        spec = WorkloadSpec(rate, self.cfg.queries_per_episode, arrivals, self.cfg.split,
                            tuple(budget), int(rng.integers(2**31)),
                            tuple(parse_mix(self.cfg.tasks).items()))
        period = float(self.cfg.metrics_periods[int(rng.integers(len(self.cfg.metrics_periods)))])
        history = int(rng.integers(2**31)) if rng.random() < self.cfg.history_fraction else None
        return Episode(spec, period, history)

    def _simulate(self, ep: Episode) -> None:
        queries = make_queries(ep.workload)
        bridge = _Bridge(self)

        async def main() -> None:
            loop = asyncio.get_running_loop()
            engines, state = start_pool(self.pool, self.info, ep)
            backend = TwinBackend(engines, self.outcome)

            async def one(q: QueryInfo) -> None:
                res = await run_query(q, bridge, backend, state,
                                      abort_on_deadline=self.pool.engine.on_deadline == "abort")
                self._events.put(("done", res))

            tasks = []
            for q in queries:
                await asyncio.sleep(max(0.0, q.arrival_s - loop.time()))
                tasks.append(loop.create_task(one(replace(q, arrival_s=loop.time()))))
            await asyncio.gather(*tasks)

        try:
            run_simulated(main())
        except BaseException as e:  # surfaced by _collect: an episode never ends silently early
            self._events.put(("end", e))
        else:
            self._events.put(("end", None))

    def _stop_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._draining = True
            if self._pending is not None:
                self._actions.put(_first_valid(self._last_obs[self._pending]["mask"]))
            self._thread.join()
        self._thread = None
        self._draining = False
        self._pending = None
        self._events = queue.Queue()
        self._actions = queue.Queue()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a new episode (random rate, arrivals and budgets)."""
        self._stop_thread()
        if seed is not None:  # RLlib may pass the same seed at every reset: vary by episode
            self._seed_base = seed
        self._resets += 1
        rng = np.random.default_rng(None if self._seed_base is None
                                    else [self._seed_base, self._resets])
        ep = self.sample_episode(rng)
        spec = ep.workload
        self.episode_stats = {"rate_per_min": spec.rate_per_min, "arrivals": spec.arrivals,
                              "budget_range_s": spec.budget_range_s,
                              "metrics_period_s": ep.metrics_period_s,
                              "history": ep.history_seed is not None, "goodput": 0.0,
                              "queries_done": 0}
        self._last_obs = {}
        self.agents = []
        self._finished: dict[str, tuple[float, dict]] = {}
        self._finished_order: list[str] = []
        self._thread = threading.Thread(target=self._simulate, args=(ep,), daemon=True)
        self._thread.start()
        obs, _, _, _, infos = self._collect()
        return obs, infos

    def step(self, action_dict: dict):
        """Answer the pending decision; run until the next one (or the episode's end)."""
        if self._pending is None or self._pending not in action_dict:
            raise ValueError(f"expected an action for {self._pending!r}")
        self._actions.put(int(action_dict[self._pending]))
        self._pending = None
        return self._collect()

    # ------------------------------------------------------------------ plumbing
    def _collect(self):
        obs, rewards, terms, infos = {}, {}, {}, {}
        while True:
            kind, *payload = self._events.get()
            if kind == "ask":
                aid, o = payload
                # RLlib ends a multi-agent episode when every agent seen so far is done; when
                # the pool runs empty between queries, hold one finished agent back a step
                held = [] if any(a not in self._finished for a in self.agents) else \
                    self._finished_order[-1:]
                self._emit(obs, rewards, terms, infos, keep=held)
                self._pending = aid
                self._last_obs[aid] = o
                self.agents.append(aid)
                obs[aid] = o
                infos.setdefault(aid, {})
                break
            if kind == "done":
                self._reward(payload[0])
                continue
            if payload[0] is not None and not self._draining:
                raise RuntimeError(f"twin simulation failed: {payload[0]!r}") from payload[0]
            self._emit(obs, rewards, terms, infos, keep=[])
            terms["__all__"] = True  # end
            break
        terms.setdefault("__all__", False)
        return obs, rewards, terms, {"__all__": False}, infos

    def _emit(self, obs, rewards, terms, infos, keep: list[str]) -> None:
        """Terminate finished agents (their final obs, reward and infos), except ``keep``."""
        for aid in [a for a in self._finished_order if a not in keep]:
            reward, info = self._finished.pop(aid)
            obs[aid] = self._last_obs[aid]
            rewards[aid] = reward
            terms[aid] = True
            infos[aid] = info
            self.agents.remove(aid)
        self._finished_order = [a for a in self._finished_order if a in keep]

    def reward_terms(self, res: QueryResult) -> RewardTerms:
        """The terms of every decision's reward of a finished query (``RewardTerms.reward``).
        The baseline is 0 unless ``counterfactual_baseline``: then 1 if the strongest model
        alone, step by step, answers the item right (whatever the load). Tolls are 0 unless
        ``congestion_toll``."""
        quality, cost, node_w = query_terms(res, self.outcome)
        base = (float(self.outcome.would_be_correct(res.query.item_id, self.info.strongest,
                                                    Strategy.DEEPTHINK, res.query.task,
                                                    res.query.query_id))
                if self.cfg.counterfactual_baseline else 0.0)
        toll = {s.node_id: min(TOLL_CAP, self.cfg.congestion_toll * slot_seconds(s))
                for s in res.steps if self._saturated(s)}
        return RewardTerms(quality, base, cost, node_w, toll)

    def _saturated(self, s: AgentResult) -> bool:
        """Had the call's model no free sequence slot when the executor chose it?"""
        return s.load is not None and free_slots(self.info[s.model], s.load) <= 0

    def _reward(self, res: QueryResult) -> None:
        t = self.reward_terms(res)
        n = int(res.query.query_id[1:6])
        nodes = {f"plan/{n}": None} | {f"step/{n}/{k}": k for k in t.weight}
        for aid, node in nodes.items():
            if aid not in self.agents or aid in self._finished:
                continue
            self._finished[aid] = (t.reward(node, self.cfg.lam),
                                   {"quality": t.quality, "cost": t.cost,
                                    "weight": t.weight_of(node),
                                    "baseline": t.baseline, "toll": t.toll_of(node)})
            self._finished_order.append(aid)
        s = self.episode_stats
        s["queries_done"] += 1
        s["goodput"] += (t.quality - s["goodput"]) / s["queries_done"]

    def close(self) -> None:
        """Stop the simulation thread."""
        if self._thread is not None:
            self._stop_thread()
