"""ray.io/v1 RayJob as KubeRay v1.5.2 runs it in its default ``K8sJobMode`` (github.com/ray-project/kuberay, tag
v1.5.2: ray-operator/controllers/ray/rayjob_controller.go, common/job.go):

- ``Status.RayClusterName`` ``<rayjob>-<5>`` and ``Status.JobId`` (``spec.jobId``, else ``<rayjob>-<5>``:
  initRayJobStatusIfNeed); the RayCluster from ``rayClusterSpec`` (:mod:`.raycluster`); once it is Ready, the
  dashboard URL ``<cluster>-head-svc.<ns>.svc.cluster.local:<dashboard port>`` (FetchHeadServiceURL), the RayJob's
  own head Service ``<rayjob>-head-svc`` (BuildHeadServiceForRayJob) and the submitter: a batch Job ``<rayjob>``
  with ``backoffLimit`` ``submitterConfig.backoffLimit`` or 2 (createNewK8sJob), its pod from
  ``submitterPodTemplate`` or a default container ``ray-job-submitter`` with the head's image
  (GetSubmitterTemplate); its first container, when it has no command, runs ``/bin/bash -ce -- "if ! ray job status
  --address http://URL ID >/dev/null 2>&1 ; then ray job submit --address http://URL --no-wait
  [--runtime-env-json ...] [--metadata-json ...] --submission-id ID [--entrypoint-num-cpus ...] -- ENTRYPOINT ; fi ;
  ray job logs --address http://URL --follow ID"`` (BuildJobSubmitCommand, configureSubmitterContainer), and every
  submitter gets ``PYTHONUNBUFFERED=1``, ``RAY_DASHBOARD_ADDRESS`` and ``RAY_JOB_SUBMISSION_ID``;
- the end (the Running state of Reconcile): the submitter Job failed -> Failed; else once the submitter finished,
  the Ray job's status from the dashboard (``GET /api/jobs/<id>``): SUCCEEDED -> Complete, FAILED or STOPPED ->
  Failed (reason AppFailed), with the Ray job's message; ``shutdownAfterJobFinishes`` then deletes the cluster.

Simpler here: ``backoffLimit`` of the whole RayJob (a new cluster per retry) and ``ttlSecondsAfterFinished`` are not
followed (said in a note); a Ray pod that exits fails the run at once, naming it (its ``restartPolicy`` would
restart it on a cluster); ``activeDeadlineSeconds``, ``clusterSelector``, ``suspend``, the ``HTTPMode``,
``InteractiveMode`` and ``SidecarMode`` submission modes are not covered (the run fails naming them).
"""

from __future__ import annotations

import copy
import http.client
import json
from typing import Any

import yaml

from tests.kubelet.controllers import Controller, suffix
from tests.kubelet.controllers.job import JobController
from tests.kubelet.controllers.raycluster import RayClusterPods, bash_command
from tests.kubelet.report import Outcome

SUBMITTER_BACKOFF_LIMIT = 2


def runtime_env_json(spec: dict[str, Any]) -> str:
    """getRuntimeEnvJson: ``runtimeEnvYAML`` as JSON (sigs.k8s.io/yaml's YAMLToJSON: keys sorted, compact)."""
    text = spec.get("runtimeEnvYAML") or ""
    return json.dumps(yaml.safe_load(text), sort_keys=True, separators=(",", ":")) if text else ""


def submit_command(spec: dict[str, Any], dashboard_url: str, job_id: str) -> str:
    """common/job.go BuildJobSubmitCommand for K8sJobMode, joined with spaces as configureSubmitterContainer does."""
    address = dashboard_url if dashboard_url.startswith("http://") else f"http://{dashboard_url}"
    cmd = ["if", "!", "ray", "job", "status", "--address", address, job_id, ">/dev/null", "2>&1", ";", "then",
           "ray", "job", "submit", "--address", address, "--no-wait"]
    env_json = runtime_env_json(spec)
    if env_json:
        cmd += ["--runtime-env-json", json.dumps(env_json)]
    if spec.get("metadata"):
        cmd += ["--metadata-json", json.dumps(json.dumps(spec["metadata"], sort_keys=True, separators=(",", ":")))]
    cmd += ["--submission-id", job_id]
    if float(spec.get("entrypointNumCpus") or 0) > 0:
        cmd += ["--entrypoint-num-cpus", f"{float(spec['entrypointNumCpus']):f}"]
    if float(spec.get("entrypointNumGpus") or 0) > 0:
        cmd += ["--entrypoint-num-gpus", f"{float(spec['entrypointNumGpus']):f}"]
    if spec.get("entrypointResources"):
        cmd += ["--entrypoint-resources", json.dumps(spec["entrypointResources"])]
    cmd += ["--", str(spec.get("entrypoint") or "").strip(), ";", "fi", ";",
            "ray", "job", "logs", "--address", address, "--follow", job_id]
    return " ".join(cmd)


def job_info(host: str, port: int, job_id: str) -> dict[str, Any] | None:
    """The dashboard's ``GET /api/jobs/<id>`` (KubeRay's dashboard client GetJobInfo); None when it cannot answer."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=5)
        conn.request("GET", f"/api/jobs/{job_id}")
        response = conn.getresponse()
        body = response.read()
        conn.close()
    except (OSError, http.client.HTTPException):
        return None
    if response.status != 200:
        return None
    info = json.loads(body)
    return info if isinstance(info, dict) else None


class RayJobController(Controller):
    kind = "RayJob"

    def __init__(self, obj: dict[str, Any], cluster: Any) -> None:
        super().__init__(obj, cluster)
        self.spec = copy.deepcopy(obj.get("spec") or {})
        self.job_id = str(self.spec.get("jobId") or f"{self.name}-{suffix()}")
        self.ray: RayClusterPods | None = None
        self.submitter: JobController | None = None
        self.finished_job: dict[str, Any] | None = None

    def _unsupported(self) -> str | None:
        mode = self.spec.get("submissionMode") or "K8sJobMode"
        if mode != "K8sJobMode":
            return f"submissionMode {mode} is not covered by the harness (K8sJobMode is)"
        for key in ("clusterSelector", "suspend", "activeDeadlineSeconds"):
            if self.spec.get(key):
                return f"spec.{key} is not covered by the harness"
        if not self.spec.get("rayClusterSpec"):
            return "spec.rayClusterSpec is missing"
        return None

    def start(self) -> None:
        if self._unsupported():
            return
        for key in ("backoffLimit", "ttlSecondsAfterFinished"):
            if self.spec.get(key):
                self.cluster.note(f"RayJob {self.name}: spec.{key} {self.spec[key]} not followed by the harness")
        labels = {"ray.io/originated-from-cr-name": self.name, "ray.io/originated-from-crd": "RayJob"}
        self.ray = RayClusterPods(self.spec["rayClusterSpec"], f"{self.name}-{suffix()}", self.namespace,
                                  self.cluster, "RayJob", labels)
        self.ray.start()
        self.pods = self.ray.pods

    def _submitter(self) -> JobController:
        assert self.ray is not None
        url = self.ray.dashboard_url()
        own = self.ray.head_service_object(f"{self.name}-head-svc")
        self.cluster.store.add(own)
        self.cluster.refresh_services()
        template = copy.deepcopy(self.spec.get("submitterPodTemplate") or {
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "ray-job-submitter",
                "image": self.spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"],
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"},
                              "requests": {"cpu": "500m", "memory": "200Mi"}}}]}})
        container = template["spec"]["containers"][0]
        if not container.get("command"):
            container["command"] = bash_command("e")
            container["args"] = [submit_command(self.spec, url, self.job_id)]
        container["env"] = [*(container.get("env") or []), {"name": "PYTHONUNBUFFERED", "value": "1"},
                            {"name": "RAY_DASHBOARD_ADDRESS", "value": url},
                            {"name": "RAY_JOB_SUBMISSION_ID", "value": self.job_id}]
        backoff = (self.spec.get("submitterConfig") or {}).get("backoffLimit", SUBMITTER_BACKOFF_LIMIT)
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": self.name, "namespace": self.namespace,
                            "labels": {"ray.io/originated-from-cr-name": self.name,
                                       "ray.io/originated-from-crd": "RayJob",
                                       "app.kubernetes.io/created-by": "kuberay-operator"}},
               "spec": {"backoffLimit": int(backoff), "template": template}}
        submitter = JobController(job, self.cluster)
        submitter.start()
        return submitter

    def _ray_pod_failed(self) -> Outcome | None:
        assert self.ray is not None
        pod = self.ray.failed_pod()
        if pod is None:
            return None
        return self.failed(pod, "a Ray pod of the RayCluster exited (ray start --block ends only on failure)")

    def poll(self) -> Outcome | None:
        problem = self._unsupported()
        if problem:
            return Outcome(False, self.workload, problem)
        assert self.ray is not None
        bad = self._ray_pod_failed()
        if bad is not None:
            return bad
        if self.submitter is None:
            if not self.ray.is_ready():
                return None
            try:
                self.submitter = self._submitter()
            except LookupError as exc:
                return Outcome(False, self.workload, str(exc))
            self.pods = [*self.ray.pods, *self.submitter.pods]
            return None
        outcome = self.submitter.poll()
        self.pods = [*self.ray.pods, *self.submitter.pods]
        if outcome is None:
            return None
        if not outcome.ok:
            outcome.workload = self.workload
            outcome.summary = f"Failed (SubmissionFailed): the submitter Job {self.name}: {outcome.summary}"
            return outcome
        assert self.ray.head is not None
        port = int(self.ray.dashboard_url().rsplit(":", 1)[1])
        info = job_info(self.ray.head.ip, port, self.job_id)
        if info is None:
            return Outcome(False, self.workload, f"Failed: submitter completed but Ray job {self.job_id} not found "
                                                 "in RayCluster")
        status = str(info.get("status"))
        if self.spec.get("shutdownAfterJobFinishes"):
            self.ray.stop()
        if status == "SUCCEEDED":
            return Outcome(True, self.workload, f"Complete (Ray job {self.job_id} SUCCEEDED)")
        pod = self.submitter.pods[-1]
        container = next(iter(pod.containers), None)
        message = str(info.get("message") or "").strip().splitlines()
        return Outcome(False, self.workload, f"Failed (AppFailed): Ray job {self.job_id} {status}"
                       + (f": {message[-1]}" if message else ""), pod.name, container,
                       pod.log_tail(container) if container else "")

    def timed_out(self, timeout: float) -> Outcome:
        """Before the submitter: the RayCluster is not Ready (KubeRay waits; the RayJob stays Initializing): name the
        first pod that is not ready by KubeRay's probes."""
        if self.ray is None or self.submitter is not None:
            return super().timed_out(timeout)
        pod = next((p for p in self.ray.pods if p.name not in self.ray.ready), None)
        if pod is None:
            return super().timed_out(timeout)
        container = next(reversed(pod.containers), None)
        return Outcome(False, self.workload, f"RayCluster {self.ray.name} not Ready within --timeout {timeout:.0f} s "
                       "(the RayJob waits in Initializing): a Ray pod not ready by KubeRay's readiness probe "
                       "(raylet health via the dashboard agent)", pod.name, container,
                       pod.log_tail(container) if container else "")

    def stop(self) -> None:
        if self.submitter is not None:
            self.submitter.stop()
        if self.ray is not None:
            self.ray.stop()
