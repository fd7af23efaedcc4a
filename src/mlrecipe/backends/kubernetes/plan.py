"""The Kubernetes plan: the manifests Helm renders for one step, and the Helm release that carries them.

What reaches the pods besides the recipe: the pipeline's env (``MLRECIPE_<STEP>_URL`` of earlier serving
steps, ``MLRECIPE_PIPELINE_DIR``) goes to every container through ``mlrecipe-lib.pipeline_env``; a path on
this machine that no pvc of the step mounts at the same place is left out (it means nothing in a pod).
``MLRECIPE_METRICS_FILE`` (:mod:`mlrecipe.metrics`) names a file on the step's first shared volume, which the
backend reads from a running pod of the step.
Credential-like env values (:mod:`mlrecipe.backends.kubernetes.secrets`) leave the values: the chart gets
``mlrecipe-lib.secret_env`` and renders ``secretKeyRef``s, the Secret itself is :attr:`KubernetesPlan.secrets`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from mlrecipe.backends.base import Plan, ReleaseContext
from mlrecipe.backends.kubernetes import secrets, training_api
from mlrecipe.metrics import METRICS_FILE, METRICS_VAR
from mlrecipe.spec.catalog import StepKind
from mlrecipe.spec.errors import SpecError
from mlrecipe.spec.load import StepSpec

#: Helm's limit on release names.
MAX_RELEASE_NAME = 53


def helm_release_name(release: str, step: str) -> str:
    """The Helm release of one step: ``<release>-<step>``, cut to 53 characters."""
    return f"{release}-{step}"[:MAX_RELEASE_NAME].rstrip("-")


@dataclass
class KubernetesPlan(Plan):
    """One step: the chart, its values, the rendered manifests (text and objects), and its Secrets.

    ``values`` and ``manifest_text`` hold no credential; ``secrets`` are full Secret manifests (values in
    ``stringData``) that the backend creates outside the Helm release; :meth:`materialize` masks them.
    """

    step: str
    chart: str
    release: str
    namespace: str
    helm_release: str
    values: dict[str, Any]
    manifest_text: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    secrets: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nnodes: int = 1
    serving: bool = False
    metrics_file: str | None = None  #: MLRECIPE_METRICS_FILE in the pods (on the step's shared volume)

    @property
    def node_count(self) -> int:
        return self.nnodes

    @property
    def server_url(self) -> str | None:
        return self.service_url() if self.serving else None

    def materialize(self) -> str:
        out = f"# step {self.step} ({self.chart}) on backend kubernetes\n{self.manifest_text}"
        for secret in self.secrets:
            out += ("---\n# Secret created by mlrecipe before the Helm release, outside it (values masked)\n"
                    + _yaml(secrets.masked(secret)))
        return out + "".join(f"# note: {n}\n" for n in self.notes)

    def service_url(self) -> str | None:
        """The in-cluster URL of the step's first Service (``http://<svc>.<ns>.svc.cluster.local:<port>``)."""
        for obj in self.objects:
            ports = (obj.get("spec") or {}).get("ports") or []
            if obj.get("kind") == "Service" and ports and (obj.get("spec") or {}).get("clusterIP") != "None":
                name = obj["metadata"]["name"]
                return f"http://{name}.{self.namespace}.svc.cluster.local:{ports[0].get('port')}"
        workload = self.workload() or {}
        if workload.get("kind") == "RayService":  # KubeRay creates the "<name>-serve-svc" Service itself
            return f"http://{workload['metadata']['name']}-serve-svc.{self.namespace}.svc.cluster.local:8000"
        return None

    def workload_kind(self) -> str | None:
        """The kind of :meth:`workload` (``None`` without one)."""
        return (self.workload() or {}).get("kind")

    def workload(self) -> dict[str, Any] | None:
        """The object whose status says how the step went (PyTorchJob, TrainJob, MPIJob, RayJob, Job, ...)."""
        for kind in ("PyTorchJob", "TrainJob", "MPIJob", "RayJob", "Job", "RayService", "LeaderWorkerSet",
                     "Deployment"):
            for obj in self.objects:
                if obj.get("kind") == kind:
                    return obj
        return None


def _yaml(obj: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)


def pipeline_env(step: StepSpec, env: dict[str, str]) -> tuple[list[dict[str, str]], list[str]]:
    """The pipeline's env as values entries for every container, and notes on what was left out.

    A value that is an absolute path is passed only when a pvc of the step is mounted at a directory
    holding it (the same path then exists in the pod, e.g. a pipeline kept under /fsx); otherwise it is a
    path of this machine only and is left out, with a note when the recipe refers to the variable.
    """
    mounts = [PurePosixPath(p.mount_path) for p in step.recipe.pvc]
    text = json.dumps(step.values, default=str)
    entries: list[dict[str, str]] = []
    notes: list[str] = []
    for name, value in env.items():
        if value.startswith("/") and not any(PurePosixPath(value).is_relative_to(m) for m in mounts):
            if name in text:
                notes.append(f"{name} ({value}) is a path on this machine that no volume of the step mounts; it "
                             "is not set in the pods (keep the pipeline on a shared volume such as /fsx, or ship "
                             "its files with git)")
            continue
        entries.append({"name": name, "value": value})
    return entries, notes


def metrics_file(step: StepSpec, ctx: ReleaseContext) -> str | None:
    """Where the step's rank 0 appends progress in its pods: ``<first pvc mount>/.mlrecipe/<namespace>/<release>/
    <step>/metrics.jsonl`` (``None`` when the step mounts no shared volume)."""
    if not step.recipe.pvc:
        return None
    mount = PurePosixPath(step.recipe.pvc[0].mount_path)
    return str(mount / ".mlrecipe" / ctx.namespace / ctx.release / step.name / METRICS_FILE)


def _chart_values(step: StepSpec, ctx: ReleaseContext, env: dict[str, str]) -> tuple[
        dict[str, Any], list[dict[str, Any]], list[str]]:
    """The values handed to Helm (pipeline env added, credentials replaced by references), Secrets, notes."""
    from mlrecipe.errors import TemplateError
    from mlrecipe.helm.tpl import expand_templates

    values = step.chart_values()
    extra, notes = pipeline_env(step, env)
    if extra:
        lib = dict(values.get(secrets.LIB) or {})
        lib["pipeline_env"] = [*(lib.get("pipeline_env") or []), *extra]
        values[secrets.LIB] = lib
    where = f"{step.chart.name} (step {step.name})"
    try:
        values, lifted = secrets.lift_ray_env_vars(values, step.chart.block)
        values, data = secrets.split_values(values)
    except secrets.SecretConflictError as exc:
        raise SpecError.single(where, str(exc)) from None
    if lifted:
        notes.append(f"{', '.join(lifted)} moved from the Ray runtime env to the env of the Ray containers (a "
                     "runtime env cannot reference a Secret; every Ray worker process inherits that env)")
    if not data:
        return values, [], notes
    try:
        rendered = expand_templates(list(data.values()), values, ctx.release, ctx.namespace)
    except TemplateError:  # Helm's message may quote the value: say only which variables
        raise SpecError.single(where, f"a Helm expression in the value of {', '.join(data)} failed") from None
    data = dict(zip(data, rendered, strict=True))
    name = secrets.secret_name(ctx.release, step.name)
    labels = {"app.kubernetes.io/instance": ctx.release, "mlrecipe.io/step": step.name,
              "app.kubernetes.io/managed-by": "mlrecipe"}
    manifest = secrets.secret_manifest(name, ctx.namespace, data, labels)
    notes.append(f"the values of {', '.join(sorted(data))} are in Secret {name} (created before the Helm release, "
                 "deleted at uninstall), not in the manifests")
    return secrets.with_secret_ref(values, name, list(data)), [manifest], notes


def _failed_expression(step: StepSpec, values: dict[str, Any], ctx: ReleaseContext) -> SpecError | None:
    """When Helm failed while executing: the recipe's value whose expression fails on its own (the charts pass the
    command block's env and ``mpirun``'s env and args through ``tpl``), at its file and line; ``None`` when none
    does. Credentials are left out: their expressions are checked where they are rendered, naming no value."""
    from mlrecipe.credentials import is_secret
    from mlrecipe.errors import TemplateError
    from mlrecipe.helm.tpl import expand_templates

    mpirun = step.recipe.mpirun
    located = [(f"{step.chart.block}.env[{i}].value", e.value) for i, e in enumerate(step.block.env)
               if not is_secret(e.name, e.value)]
    if mpirun is not None:
        located += [(f"mpirun.env[{i}].value", e.value) for i, e in enumerate(mpirun.env)
                    if not is_secret(e.name, e.value)]
        located += [(f"mpirun.args[{i}]", a) for i, a in enumerate(mpirun.args)]
    templated = [(path, text) for path, text in located if "{{" in text]
    if not templated:
        return None
    try:
        expand_templates([text for _, text in templated], values, ctx.release, ctx.namespace)
    except TemplateError as exc:
        if exc.index is not None:
            return SpecError([step.issue(templated[exc.index][0], str(exc))])
    return None


def render_step(step: StepSpec, ctx: ReleaseContext, env: dict[str, str] | None = None,
                training: tuple[str, str] = ("v1", "torch-distributed")) -> KubernetesPlan:
    """Render ``step``'s chart with Helm; a value the chart's schema or templates refuse becomes a
    :class:`SpecError` at the recipe's file, line and field.

    ``env`` is the pipeline's env for this step (outputs of earlier steps); see the module docstring.
    ``training`` is (training API, ClusterTrainingRuntime): with ``v2`` the PyTorchJob charts render a TrainJob.
    """
    from mlrecipe.helm._engine import parse_yaml
    from mlrecipe.helm.render import ChartRenderError, chart_path, render_text

    metrics = metrics_file(step, ctx)
    pods_env = {**(env or {}), **({METRICS_VAR: metrics} if metrics else {})}
    values, secret_objects, notes = _chart_values(step, ctx, pods_env)
    values, training_notes = training_api.apply(values, step.chart.name, *training)
    notes += training_notes
    try:
        text = render_text(chart_path(step.chart.name), values, ctx.release, ctx.namespace)
    except ChartRenderError as exc:
        if exc.errors:  # a value the chart refuses: at the recipe's file and line
            raise SpecError([step.issue(e.path, f"{e.message} (chart {step.chart.name})")
                             for e in exc.errors]) from exc
        raise _failed_expression(step, values, ctx) or SpecError.single(
            f"{step.chart.name} (step {step.name})", exc.detail) from exc
    objects = [obj for doc in text.split("\n---\n") if (obj := parse_yaml(doc.removeprefix("---\n")))]
    return KubernetesPlan(
        step=step.name,
        chart=step.chart.name,
        release=ctx.release,
        namespace=ctx.namespace,
        helm_release=helm_release_name(ctx.release, step.name) if step.named_by_step else ctx.release,
        values=values,
        manifest_text=text,
        objects=objects,
        secrets=secret_objects,
        notes=notes,
        nnodes=step.recipe.resources.nnodes,
        serving=step.chart.kind is StepKind.SERVER,
        metrics_file=metrics,
    )
