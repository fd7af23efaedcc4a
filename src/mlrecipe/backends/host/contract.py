"""What a host step's runtime gets: the step program, the recipe's env and the env contract of DESIGN.md.

The contract is split where the backends differ: :func:`contract_env` holds what every node of the step shares,
:func:`node_contract_env` what differs per node (its rank and the master's address), which the local backend knows
when it plans and a Slurm job only once it runs (its batch script computes them).
"""

from __future__ import annotations

from typing import Any

from mlrecipe.backends.base import ReleaseContext
from mlrecipe.metrics import METRICS_FILE, METRICS_VAR
from mlrecipe.nccl_network import requests_efa
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.load import StepSpec


def step_program(step: StepSpec, ctx: ReleaseContext) -> dict[str, Any]:
    """The step program (JSON) the runtime executes; the same on every host backend."""
    recipe = step.recipe
    git = recipe.git.model_dump() if recipe.git.repo_url else None
    values = step.chart_values()
    block = values.get(step.chart.block) or {}
    program: dict[str, Any] = {
        "version": 1,
        "release": ctx.release,
        "namespace": ctx.namespace,
        "step": step.name,
        "chart": step.chart.name,
        "git": git,
        "inline_script": list(recipe.inline_script),
        "pre_script": list(recipe.pre_script),
        "command": [str(c) for c in block.get("command") or []],
        "args": [str(a) for a in block.get("args") or []],
        "post_script": list(recipe.post_script),
    }
    if recipe.watchdog is not None:  # absent: the program (and the golden plans) as without a watchdog
        program["watchdog"] = recipe.watchdog.model_dump()
    if recipe.network_check is not None:  # the fabric check (docs/operating.md): a map, with the baseline's key
        check = recipe.network_check.model_dump()
        check["node_type"] = check.get("node_type") or recipe.resources.node_type
        check["efa"] = requests_efa(values)
        program["network_check"] = check
    return program


def recipe_env(step: StepSpec, ctx: ReleaseContext) -> dict[str, str]:
    """The command block's env, with Helm expressions evaluated by the real Helm engine."""
    entries = step.block.env
    paths = [f"{step.chart.block}.env[{i}].value" for i in range(len(entries))]
    if step.recipe.mpirun is not None:
        entries = [*step.recipe.mpirun.env, *entries]
        paths = [f"mpirun.env[{i}].value" for i in range(len(step.recipe.mpirun.env))] + paths
    names = [e.name for e in entries]
    values = [e.value for e in entries]
    if any("{{" in v for v in values):
        from mlrecipe.errors import SpecError, TemplateError
        from mlrecipe.helm.tpl import expand_templates

        try:
            values = expand_templates(values, step.chart_values(), ctx.release, ctx.namespace)
        except TemplateError as exc:  # at the value's file and line
            if exc.index is None:
                raise
            raise SpecError([step.issue(paths[exc.index], str(exc))]) from None
    return dict(zip(names, values, strict=True))


def contract_env(step: StepSpec, ctx: ReleaseContext) -> dict[str, str]:
    """The env contract every node of ``step`` shares (sizes, release, step, backend, metrics file, rendezvous)."""
    res = step.recipe.resources
    env = {
        "PET_NNODES": str(res.nnodes),
        "PET_NPROC_PER_NODE": str(res.nproc_per_node),
        "MLRECIPE_RELEASE": ctx.release,
        "MLRECIPE_NAMESPACE": ctx.namespace,
        "MLRECIPE_STEP": step.name,
        "MLRECIPE_BACKEND": ctx.runs_on or ctx.backend,
        METRICS_VAR: str(ctx.step_dir(step.name) / METRICS_FILE),
    }
    policy = step.recipe.elastic_policy
    if step.chart.kind is StepKind.TORCH_ELASTIC:
        lo = (policy.min_replicas if policy else None) or res.nnodes
        hi = (policy.max_replicas if policy else None) or res.nnodes
        if policy and policy.nproc_per_node:
            env["PET_NPROC_PER_NODE"] = str(policy.nproc_per_node)
        env["PET_NNODES"] = f"{lo}:{hi}" if lo != hi else str(lo)
        env["PET_RDZV_BACKEND"] = policy.rdzv_backend if policy else "c10d"
        env["PET_RDZV_ID"] = f"{ctx.release}-{step.name}"
        env["PET_MAX_RESTARTS"] = str(policy.max_restarts if policy else 0)
    return env


def node_contract_env(step: StepSpec, rank: int, master_addr: str, master_port: int) -> dict[str, str]:
    """The env contract of node ``rank``: its rank and the master's address (the rendezvous endpoint if elastic)."""
    env = {"PET_NODE_RANK": str(rank), "PET_MASTER_ADDR": master_addr, "PET_MASTER_PORT": str(master_port)}
    if step.chart.kind is StepKind.TORCH_ELASTIC:
        env["PET_RDZV_ENDPOINT"] = f"{master_addr}:{master_port}"
    return env
