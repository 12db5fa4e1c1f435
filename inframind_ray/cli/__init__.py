"""The ``inframind`` command line: one typer app, one module of commands per plane
(``bench.py``: the twin's sweep, capacity, predictors, pools, embeddings; ``learn.py``: training;
``serve.py``: Ray Serve, queries, load, demo, overhead; ``policy.py``: the policy registry;
the ``twin`` sub-app of calibration commands lives in ``fidelity/cli.py``). User errors become
one line and exit code 2."""

from __future__ import annotations

import sys

import typer

from inframind_ray.cli import bench as _bench
from inframind_ray.cli import learn as _learn
from inframind_ray.cli import serve as _serve
from inframind_ray.cli import tasks as _tasks
from inframind_ray.errors import InframindError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="InfraMind on Ray: infrastructure-aware multi-agent LLM orchestration.")

for _command in (_bench.bench, _bench.capacity, _learn.train, _learn.train_speed, _learn.learn,
                 _bench.predictors, _bench.pools, _bench.embed, _tasks.tasks, _tasks.grade,
                 _serve.serve, _serve.serve_config, _serve.kuberay, _serve.query, _serve.load,
                 _serve.calibrate,
                 _serve.demo, _serve.overhead):
    app.command()(_command)

from inframind_ray.cli.policy import policy_app  # noqa: E402
from inframind_ray.fidelity.cli import twin_app  # noqa: E402

app.add_typer(twin_app, name="twin")
app.add_typer(policy_app, name="policy")


def main() -> None:
    """Entry point: user errors become one line on stderr and exit code 2."""
    try:
        rc = app(standalone_mode=False)  # a command's typer.Exit(code) comes back as its code
    except InframindError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as e:  # usage errors (click's, or the copy of click that typer vendors)
        if isinstance(e, _usage_errors()):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, _exit_types()):
            sys.exit(e.exit_code)
        raise
    if isinstance(rc, int) and rc:
        sys.exit(rc)


def _classes(attr: str, *modules: str) -> tuple[type, ...]:
    """``attr`` of every importable module among ``modules``."""
    import contextlib
    import importlib

    out = []
    for name in modules:
        with contextlib.suppress(ImportError, AttributeError):
            out.append(getattr(importlib.import_module(name), attr))
    return tuple(out)


def _usage_errors() -> tuple[type, ...]:
    return _classes("ClickException", "typer._click.exceptions", "click.exceptions")


def _exit_types() -> tuple[type, ...]:
    return _classes("Exit", "typer.exceptions", "typer._click.exceptions", "click.exceptions")
