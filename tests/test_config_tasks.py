"""One source for configuration (deployment files extend a shipped pool, one YAML loader, defaults
from the constants) and the MMLU-Pro task family (item facts, grading)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inframind_ray import assumptions as A
from inframind_ray.config import ServingConfig, load_pool
from inframind_ray.core import constants as C
from inframind_ray.core.strategy import Strategy
from inframind_ray.errors import ConfigError
from inframind_ray.pools.cards import build_pool_info
from inframind_ray.tasks.mmlu_pro import mmlu_pro
from inframind_ray.tasks.workload import WorkloadSpec, make_queries

ROOT = Path(__file__).resolve().parents[1]


def test_twin_deployment_is_the_default_pool_plus_serving():
    """deployments/twin_pool.yaml names the shipped pool and adds only its Serve side."""
    dep, pool = load_pool(ROOT / "deployments" / "twin_pool.yaml"), load_pool("default")
    assert dep.models == pool.models and dep.engine == pool.engine
    assert dep.serving.records_dir == "runs/records"
    gpu = load_pool(ROOT / "deployments" / "vllm_gpu_pool.yaml")
    assert [m.name for m in gpu.models] == [m.name for m in pool.models]
    assert all(m.engine.kind == "vllm" for m in gpu.models)
    # since issue 19 the GPU deployment takes its slots from the pool (vLLM's default)
    assert [m.max_num_seqs for m in gpu.models] == [m.max_num_seqs for m in pool.models]
    assert gpu.models[-1].max_num_seqs == 1024
    assert gpu.models[0].gpu == pool.models[0].gpu
    small = load_pool(ROOT / "deployments" / "vllm_cpu_small.yaml")
    tiny = load_pool(ROOT / "deployments" / "vllm_cpu_pool.yaml")
    assert small.models[0].engine.model.endswith("small-llama")
    kv = [d.models[0].engine.kv_cache_memory_bytes for d in (small, tiny)]
    assert kv[0] == kv[1]


@pytest.mark.parametrize("text,field", [
    ("pool: default\nmodels:\n  gpt-9: {max_num_seqs: 4}\n", "pool.models.gpt-9"),
    ("pool: default\nmodels:\n  - name: x\n", "pool.models"),
    ("pool: default\nserving: {port: 0}\n", "pool.serving.port"),
    ("pool: default\ncolour: red\n", "pool.colour"),
    ("pool: no-such-pool\n", "pool"),
    ("pool: self.yaml\n", "pool.pool"),
])
def test_bad_extension_names_the_field(text, field, tmp_path):
    """An override of a model the pool lacks, a bad Serve section, an unknown pool or a file
    that extends itself: ConfigError naming the field."""
    p = tmp_path / "self.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_pool(p)
    assert e.value.field == field


def test_defaults_read_the_one_source():
    """Serving and workload defaults are the constants' and assumptions' values."""
    s = ServingConfig()
    assert (s.metrics_period_s, s.stale_after_s, s.unavailable_after_s) == (
        C.METRICS_PERIOD_S, C.STALE_AFTER_S, C.UNAVAILABLE_AFTER_S)
    assert WorkloadSpec(10, 5).budget_range_s == A.BUDGET_RANGE_S


def test_mmlu_pro_item_facts_and_grading():
    """Item facts come from one place: the query text carries lettered options, the grader
    extracts the answer from a full response, an unknown id is a clear KeyError."""
    task = mmlu_pro()
    q = make_queries(WorkloadSpec(10, 3, seed=5))[0]
    i = task.index(q.item_id)
    assert q.category == task.category(q.item_id) and "\n(A) " in q.text
    assert q.prompt_tokens == task.prompt_tokens[i] and q.fewshot_tokens == task.fewshot_tokens[i]
    right = str(task.answers[i])
    wrong = next(x for x in "ABCDEFGHIJ" if x != right)
    assert task.grade(q.item_id, f"Some reasoning. The answer is ({right}).")
    assert task.grade(q.item_id, right) and not task.grade(q.item_id, wrong)
    assert not task.grade(q.item_id, None) and not task.grade(q.item_id, "no idea")
    with pytest.raises(KeyError, match="unknown MMLU-Pro question id -1"):
        task.index(-1)


def test_model_cards_without_the_simulator():
    """Cards come from the recorded data alone: DeepThink budget within its cap, Flash cheaper
    than DeepThink, train accuracy of the 70B above the 3.8B's."""
    info = build_pool_info(load_pool("default"))
    big, small = info["llama-3.1-70b"], info["phi-3-mini"]
    assert big.budget_tokens <= big.max_tokens[Strategy.DEEPTHINK]
    assert big.expected_tokens[Strategy.FLASH] < big.expected_tokens[Strategy.DEEPTHINK]
    assert big.accuracy > small.accuracy


def test_every_shipped_rllib_config_loads():
    """Each file in rllib_configs/ validates under its schema (a typo in a shipped config fails
    here, not in a user's first run), and the continual learner's file and its schema defaults
    agree on the step and the held multiplier."""
    from inframind_ray.learning.continual import ContinualConfig, load_continual_config
    from inframind_ray.learning.train_config import load_train_config

    files = sorted((ROOT / "rllib_configs").glob("*.yaml"))
    assert len(files) >= 5
    for p in files:
        (load_continual_config if p.stem == "continual" else load_train_config)(p)
    shipped = load_continual_config(ROOT / "rllib_configs/continual.yaml")
    default = ContinualConfig()
    assert shipped.ppo.lr == default.ppo.lr == 1e-3
    assert shipped.lagrangian.lam_lr == default.lagrangian.lam_lr == 0.0


def test_a_recipe_that_extends_another_states_only_what_differs(tmp_path):
    """``extends:`` lays a recipe's keys on the file it names (mappings merged, lists replaced,
    through a chain); the shipped 240-iteration recipe is the overlap recipe but for its name and
    iteration count; a missing base or a loop is one ConfigError naming ``config.extends``."""
    from inframind_ray.learning.train_config import load_train_config

    rc = ROOT / "rllib_configs"
    long, base = (load_train_config(rc / f"rl-sampled-cf-tail-delay-overlap{s}.yaml").model_dump()
                  for s in ("-240", ""))
    assert (long["ppo"]["iterations"], base["ppo"]["iterations"]) == (240, 120)
    long["ppo"]["iterations"], long["name"] = 120, base["name"]
    assert long == base
    (tmp_path / "a.yaml").write_text(f"extends: {rc / 'default.yaml'}\nname: a\n"
                                     "env: {load_range: [0.5, 1.5]}\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\nname: b\nppo: {iterations: 3}\n")
    b, d = load_train_config(tmp_path / "b.yaml"), load_train_config(rc / "default.yaml")
    assert (b.name, b.ppo.iterations, tuple(b.env.load_range)) == ("b", 3, (0.5, 1.5))
    assert b.ppo.lr == d.ppo.lr and b.env.pool == d.env.pool
    for text, says in (("extends: b.yaml\nname: c\n", "extends itself"),
                       ("extends: none.yaml\n", "no such file")):
        (tmp_path / "b.yaml").write_text(text)
        with pytest.raises(ConfigError) as e:
            load_train_config(tmp_path / "b.yaml")
        assert e.value.field == "config.extends" and says in e.value.message
