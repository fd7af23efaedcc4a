"""The Kubernetes plan: the manifests Helm renders for one step, and the Helm release that carries them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlrecipe.backends.base import Plan, ReleaseContext
from mlrecipe.spec.errors import SpecError, SpecIssue
from mlrecipe.spec.load import StepSpec

#: Helm's limit on release names.
MAX_RELEASE_NAME = 53


def helm_release_name(release: str, step: str) -> str:
    """The Helm release of one step: ``<release>-<step>``, cut to 53 characters."""
    return f"{release}-{step}"[:MAX_RELEASE_NAME].rstrip("-")


@dataclass
class KubernetesPlan(Plan):
    """One step: the chart, its values, and the rendered manifests (text and objects)."""

    step: str
    chart: str
    release: str
    namespace: str
    helm_release: str
    values: dict[str, Any]
    manifest_text: str
    objects: list[dict[str, Any]] = field(default_factory=list)

    def materialize(self) -> str:
        return f"# step {self.step} ({self.chart}) on backend kubernetes\n{self.manifest_text}"

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

    def workload(self) -> dict[str, Any] | None:
        """The object whose status says how the step went (PyTorchJob, MPIJob, RayJob, Job, ...)."""
        for kind in ("PyTorchJob", "MPIJob", "RayJob", "Job", "RayService", "LeaderWorkerSet", "Deployment"):
            for obj in self.objects:
                if obj.get("kind") == kind:
                    return obj
        return None


def render_step(step: StepSpec, ctx: ReleaseContext) -> KubernetesPlan:
    """Render ``step``'s chart with Helm; schema violations become a :class:`SpecError` with field paths."""
    from mlrecipe.helm._engine import parse_yaml
    from mlrecipe.helm.render import ChartRenderError, chart_path, render_text

    values = step.chart_values()
    try:
        text = render_text(chart_path(step.chart.name), values, ctx.release, ctx.namespace)
    except ChartRenderError as exc:
        where = f"{step.chart.name} (step {step.name})"
        if exc.errors:
            raise SpecError([SpecIssue(where, None, e.path, e.message) for e in exc.errors]) from exc
        raise SpecError.single(where, exc.detail) from exc
    objects = [obj for doc in text.split("\n---\n") if (obj := parse_yaml(doc.removeprefix("---\n")))]
    return KubernetesPlan(
        step=step.name,
        chart=step.chart.name,
        release=ctx.release,
        namespace=ctx.namespace,
        helm_release=helm_release_name(ctx.release, step.name),
        values=values,
        manifest_text=text,
        objects=objects,
    )
