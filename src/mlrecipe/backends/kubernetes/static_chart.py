"""A throwaway chart whose templates are the already-rendered manifests of a plan.

Installing it makes the Helm release hold exactly what ``Plan.materialize()`` printed, under a
release name of its own (``<release>-<step>``), while the objects keep the names the step's chart
gave them with the pipeline's release name.
"""

from __future__ import annotations

from pathlib import Path

from mlrecipe.backends.kubernetes.plan import KubernetesPlan


def escape_template(text: str) -> str:
    """Make ``text`` render to itself through Go templates (only ``{{`` is special)."""
    return text.replace("{{", '{{ "{{" }}')


def write_static_chart(plan: KubernetesPlan, directory: Path) -> Path:
    """Write the chart into ``directory`` and return it."""
    chart_name = plan.chart.rsplit("/", 1)[-1]
    (directory / "templates").mkdir(parents=True, exist_ok=True)
    (directory / "Chart.yaml").write_text(
        f"apiVersion: v2\nname: {chart_name}\nversion: 0.1.0\ntype: application\n"
        f"description: rendered manifests of step {plan.step} of release {plan.release}\n",
        encoding="utf-8",
    )
    (directory / "templates" / "manifests.yaml").write_text(escape_template(plan.manifest_text), encoding="utf-8")
    return directory
