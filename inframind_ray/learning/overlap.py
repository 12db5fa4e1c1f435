"""PPO whose sampling overlaps its learning (``ppo.overlap``).

RLlib's PPO samples a batch, then updates on it, then syncs the weights: on two cores one of
them waits at every phase (sampling is ~60 % of an iteration and runs on one core;
docs/learning.md, "Training throughput"). Here one remote env runner samples batch k+1 while
the driver's learner updates on batch k, as IMPALA's driver does (without its V-trace
correction):

- iteration k fetches batch k, at once asks the runner for batch k+1, updates on batch k, and
  sends the new weights, which the runner takes after batch k+1 (Ray runs an actor's calls in
  order), so batch k+2 is sampled with them;
- the runner sends the finished queries as columns (``QueryRows``: a few large arrays, where
  thousands of episode objects took ~0.8 s to pickle and unpickle per 4,000 decisions); the
  driver builds the episodes while the runner samples the next batch;
- every batch is therefore sampled by the weights of one update before the learner's: one
  iteration of policy lag. PPO's ratio is taken against the sampling policy's recorded
  log-probabilities, so its clip bounds the step from the policy that acted, as always; the
  lag only makes the first epoch's ratio differ from 1.

The connector-state sync after each iteration is skipped (as IMPALA does): it would wait for
the runner's sample in flight, and the env-to-module pipeline of ``DecisionEnvRunner`` has no
state to merge.
"""

from __future__ import annotations

from ray.rllib.algorithms.ppo import PPO
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from inframind_ray.learning.heap import settle

TAG = "overlapped-sample"
LAG = "policy_lag_updates"
"""Metric key: learner updates between the weights that sampled a batch and the learner's."""


class OverlappedPPO(PPO):
    """See the module docstring. Needs exactly one remote env runner."""

    _in_flight = False
    _updates = 0

    def training_step(self) -> None:
        """One iteration: fetch the batch in flight, ask for the next, learn, send weights."""
        group = self.env_runner_group
        if group.num_remote_workers() != 1:
            raise ValueError("ppo.overlap needs num_env_runners: 1")
        if not self._in_flight:  # the first iteration (or the first after a restore)
            settle()  # the driver's heap after setup (learning/heap.py)
            self._ask(group)
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            ready: list = []
            while not ready:
                ready = group.fetch_ready_async_reqs(tags=TAG, timeout_seconds=None)
            (_, (rows, runner_metrics, sampled_at)), = ready
            self._ask(group)
            self.metrics.aggregate([runner_metrics], key=ENV_RUNNER_RESULTS)
            episodes = rows.episodes(self.config.policy_mapping_fn)
        if not episodes:
            return
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            timesteps = {
                NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek(
                    (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)),
                NUM_MODULE_STEPS_TRAINED_LIFETIME: self.metrics.peek(
                    (LEARNER_RESULTS, ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME),
                    default=0),
            }
            results = self.learner_group.update(
                episodes=episodes, timesteps=timesteps, num_epochs=self.config.num_epochs,
                minibatch_size=self.config.minibatch_size,
                shuffle_batch_per_epoch=self.config.shuffle_batch_per_epoch)
            self.metrics.aggregate(results, key=LEARNER_RESULTS)
            self.metrics.log_value((LEARNER_RESULTS, ALL_MODULES, LAG),
                                   self._updates - sampled_at, window=1)
            self._updates += 1
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            group.sync_weights(from_worker_or_learner_group=self.learner_group,
                               policies=set(results[0]) - {ALL_MODULES}, inference_only=True)
            self._synced = self._updates

    def _ask(self, group) -> None:
        """Ask the runner for the next batch; it carries the update count of the weights it
        will be sampled with (the last ones sent: calls on the actor run in order)."""
        n, at = self.config.total_train_batch_size, getattr(self, "_synced", 0)
        sent = group.foreach_env_runner_async(
            lambda r: (r.sample_rows(num_timesteps=n), r.get_metrics(), at), tag=TAG)
        if sent != 1:
            raise RuntimeError("the env runner did not take the sample request")
        self._in_flight = True
