"""Which Kubeflow training API a PyTorchJob chart renders: ``v1`` (``PyTorchJob``, kubeflow.org/v1, the training
operator) or ``v2`` (``TrainJob``, trainer.kubeflow.org/v1alpha1, Kubeflow Trainer v2 on a
``ClusterTrainingRuntime``).

``training_api: auto`` (the default) asks the cluster's API discovery for the two kinds: v2 when it serves
``TrainJob`` and not ``PyTorchJob``, else v1. Without a cluster (``template``, a dry run with no kubeconfig) auto is v1.
"""

from __future__ import annotations

from typing import Any

TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"
PYTORCHJOB_CRD = "pytorchjobs.kubeflow.org"
#: CRD -> the training API it serves.
API_OF_CRD = {PYTORCHJOB_CRD: "v1", TRAINJOB_CRD: "v2"}
#: CRD -> the version the charts render.
CRD_VERSION = {PYTORCHJOB_CRD: "v1", TRAINJOB_CRD: "v1alpha1"}
#: Charts that render a TrainJob under v2.
V2_CHARTS = frozenset({"training/pytorchjob-distributed", "training/pytorchjob-elastic"})
#: Charts with no Trainer v2 equivalent today, and the operator they stay on.
STAYS_ON = {
    "training/mpijob": "the MPI operator (MPIJob)",
    "training/mpijob-horovod-tensorflow-gpu": "the MPI operator (MPIJob with Horovod)",
    "data-prep/mpijob-data-process": "the MPI operator (MPIJob)",
    "training/raytrain": "KubeRay (RayJob)",
    "data-prep/ray-data-process": "KubeRay (RayJob)",
}


def served_apis(crd_names: set[str]) -> list[str]:
    """The training APIs a cluster serves, from the names of its CRDs: a sublist of ``["v1", "v2"]``."""
    return sorted(api for crd, api in API_OF_CRD.items() if crd in crd_names)


def choose(option: str, served: list[str] | None) -> str:
    """The API to render: the option when it is ``v1`` or ``v2``; for ``auto``, v2 when the cluster serves v2 and
    not v1, else v1 (``served`` is ``None`` without a cluster)."""
    if option in ("v1", "v2"):
        return option
    return "v2" if served is not None and "v2" in served and "v1" not in served else "v1"


def apply(values: dict[str, Any], chart: str, api: str, runtime: str) -> tuple[dict[str, Any], list[str]]:
    """The chart's values for ``api`` (v2 adds ``mlrecipe-lib.training_api`` and ``training_runtime``) and a note
    for a chart that stays on its own operator under v2."""
    if api != "v2":
        return values, []
    if chart not in V2_CHARTS:
        stays = STAYS_ON.get(chart)
        note = (f"training_api v2: {chart} has no Kubeflow Trainer v2 equivalent; it stays on {stays}"
                if stays else "")
        return values, [note] if note else []
    lib = dict(values.get("mlrecipe-lib") or {})
    lib.update({"training_api": "v2", "training_runtime": runtime})
    notes = []
    if values.get("scheduler_name"):
        notes.append("training_api v2: scheduler_name is not set in the TrainJob's pods (Trainer v2.3.0's "
                     "runtimePatches cannot set it): set schedulerName in the ClusterTrainingRuntime "
                     f"{runtime}")
    policy = values.get("elastic_policy") or {}
    if chart == "training/pytorchjob-elastic" and (policy.get("min_replicas") or policy.get("max_replicas")):
        notes.append("training_api v2: Trainer v2.3.0 has no elastic TrainJob; elastic_policy's min/max_replicas "
                     "are not applied (the TrainJob runs resources.nnodes nodes, c10d rendezvous)")
    return {**values, "mlrecipe-lib": lib}, notes
