"""trainer.kubeflow.org/v1alpha1 TrainJob as Kubeflow Trainer v2.3.0 runs it on a ClusterTrainingRuntime with one
replicated job ``node`` (``torch-distributed``; the runtimes Trainer v2.3.0 installs, from ``../shared/crds/``):

- the runtime's pod template with the TrainJob's ``runtimePatches`` applied, and the trainer fields on its container
  ``node`` (image, command, args, env, resourcesPerNode); the torch plugin's env (``PET_NNODES``,
  ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK`` from the completion index annotation, ``PET_MASTER_ADDR``
  ``<job>-node-0-0.<job>``, ``PET_MASTER_PORT`` 29400) and container port 29400
  (pkg/runtime/framework/plugins/torch/torch.go EnforceMLPolicy); see ``tests/kubernetes/trainer_v2.py``;
- JobSet (the JobSet Trainer builds from it): one Indexed Job ``<job>-node-0`` of numNodes pods, pod ``i`` with
  hostname ``<job>-node-0-<i>``, subdomain ``<job>`` and a headless Service ``<job>`` (JobSet's DNS hostnames), the
  labels ``jobset.sigs.k8s.io/jobset-name`` / ``replicatedjob-name`` / ``job-index`` and the completion index;
- success: every node's pod succeeded (JobSet's success policy All); a failed pod is retried up to the Job's default
  backoffLimit (6), then the TrainJob fails (JobSet failurePolicy: none in the runtime, so no JobSet restart).
"""

from __future__ import annotations

import copy
from typing import Any

from tests.kubelet.controllers import Controller, suffix
from tests.kubelet.pods import Pod
from tests.kubelet.report import Outcome
from tests.kubernetes import trainer_v2

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
JOB_BACKOFF_LIMIT = 6


class TrainJobController(Controller):
    kind = "TrainJob"

    def __init__(self, obj: dict[str, Any], cluster: Any) -> None:
        super().__init__(obj, cluster)
        ref = obj["spec"]["runtimeRef"]
        if ref.get("kind", "ClusterTrainingRuntime") != "ClusterTrainingRuntime":
            raise ValueError(f"runtimeRef kind {ref.get('kind')}: only ClusterTrainingRuntimes are covered")
        try:
            runtime = trainer_v2.runtime(ref["name"])
        except FileNotFoundError:
            raise ValueError(f"ClusterTrainingRuntime {ref['name']} is not one Trainer v2.3.0 installs") from None
        self.template = trainer_v2.node_template(obj, runtime)
        self.nodes = trainer_v2.num_nodes(obj, runtime)

    def start(self) -> None:
        selector = {"jobset.sigs.k8s.io/jobset-name": self.name}
        self.cluster.store.add({"apiVersion": "v1", "kind": "Service",
                                "metadata": {"name": self.name, "namespace": self.namespace},
                                "spec": {"clusterIP": "None", "selector": selector}})
        made = []
        for index in range(self.nodes):
            template = copy.deepcopy(self.template)
            template.setdefault("metadata", {}).setdefault("annotations", {})[INDEX_KEY] = str(index)
            for container in [*template["spec"].get("initContainers", []), *template["spec"]["containers"]]:
                container.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
            job = f"{self.name}-node-0"
            labels = {**selector, "jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "0",
                      "batch.kubernetes.io/job-name": job, INDEX_KEY: str(index)}
            obj = self.cluster.new_pod(template, f"{job}-{index}-{suffix()}", self.namespace, labels,
                                       hostname=f"{job}-{index}", subdomain=self.name)
            pod = Pod(obj, self.cluster)
            self.cluster.register(pod)
            # cluster DNS's search domain <ns>.svc.cluster.local lets a pod reach <hostname>.<subdomain>, the form
            # of PET_MASTER_ADDR; the harness has no search domains, so that form is a name of its own here
            self.cluster.addresses.add(pod.ip, [f"{job}-{index}.{self.name}"])
            made.append(pod)
        for pod in made:  # every name resolves before any pod starts
            self.pods.append(pod)
            pod.start()

    def poll(self) -> Outcome | None:
        for pod in list(self.pods):
            if pod.phase == "Failed":
                if self.may_restart(JOB_BACKOFF_LIMIT):
                    self.restart(pod)
                    continue
                return self.failed(pod, "Failed: JobSetFailed (a node's Job reached its backoffLimit)")
        if all(p.phase == "Succeeded" for p in self.pods):
            return Outcome(True, self.workload, f"Complete ({len(self.pods)}/{self.nodes} nodes succeeded)")
        return None
