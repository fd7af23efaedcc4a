"""A recorded cluster behind the one client the Kubernetes backend talks through (no API server runs here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlrecipe.backends.kubernetes.cluster import KubeClient


class FakeCluster(KubeClient):
    """Answers with the objects the test sets and records every action as ``(verb, name)``."""

    def __init__(self, workload: Callable[[], dict[str, Any] | None], pods: Callable[[], list[dict[str, Any]]],
                 logs: Callable[[str], str] = lambda name: "", context: str = "test-context",
                 files: dict[str, str] | None = None) -> None:
        super().__init__(None, context)
        self.workload, self.pods, self.logs = workload, pods, logs
        self.files = files if files is not None else {}  #: "pod:path" -> the file's text in that pod
        self.calls: list[tuple[str, str]] = []
        self.refuse: Exception | None = None

    def resolve_cluster(self) -> tuple[str | None, str | None]:
        return self.kubeconfig, self.context

    def install(self, plan: Any) -> dict[str, Any]:
        if self.refuse is not None:
            raise self.refuse
        self.calls.append(("install", plan.helm_release))
        return {}

    def uninstall(self, helm_release: str, namespace: str) -> None:
        self.calls.append(("uninstall", helm_release))

    def apply_secret(self, manifest: dict[str, Any]) -> None:
        self.calls.append(("secret", manifest["metadata"]["name"]))

    def delete_secret(self, name: str, namespace: str) -> None:
        self.calls.append(("delete-secret", name))

    def get_object(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        return self.workload()

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.pods()

    def pod_log(self, name: str, namespace: str) -> str:
        return self.logs(name)

    def pod_file_tail(self, name: str, namespace: str, path: str, max_bytes: int = 64 * 1024) -> str:
        self.calls.append(("tail", f"{name}:{path}"))
        return self.files.get(f"{name}:{path}", "")[-max_bytes:]
