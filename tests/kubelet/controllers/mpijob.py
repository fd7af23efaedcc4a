"""kubeflow.org/v2beta1 MPIJob as the MPI operator v0.6.0 runs it (github.com/kubeflow/mpi-operator tag v0.6.0,
pkg/controller/mpi_job_controller.go and pkg/apis/kubeflow/v2beta1/default.go):

- defaults: slotsPerWorker 1, sshAuthMountPath /root/.ssh, OpenMPI, launcherCreationPolicy AtStartup;
- Secret ``<job>-ssh`` (newSSHAuthSecret): a fresh ECDSA P-521 key, ``ssh-privatekey`` (PEM) and ``ssh-publickey``,
  mounted in every pod's first container at sshAuthMountPath as ``id_rsa``, ``id_rsa.pub``, ``authorized_keys``
  (mode 0600 at /root/.ssh);
- ConfigMap ``<job>-config`` (newConfigMap): ``hostfile`` lines ``<job>-worker-<i>.<job>.<ns>.svc slots=<S>`` and
  ``discover_hosts.sh`` (running workers), mounted on the launcher at /etc/mpi (0444 / 0555);
- headless Service ``<job>`` (newJobService) over the job's pods; pods get hostname ``<job>-worker-<i>`` /
  ``<job>-launcher`` and subdomain ``<job>``, plus the DNS search ``<job>.<ns>.svc.cluster.local``;
- workers (newWorker): the container as given (``/usr/sbin/sshd -De`` only when it has neither command nor args),
  ``K_MPI_JOB_ROLE=worker``; launcher (newLauncherPodTemplate, a batch Job ``<job>-launcher``):
  ``K_MPI_JOB_ROLE=launcher``, ``OMPI_MCA_orte_keep_fqdn_hostnames=true``,
  ``OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile``, ``OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10``,
  ``OMPI_MCA_orte_set_default_slots=<S>``, empty ``NVIDIA_VISIBLE_DEVICES`` / ``NVIDIA_DRIVER_CAPABILITIES``;
- the job succeeds when the launcher does; it fails when the launcher fails past the restart budget.

Every pod's image is taken as built FROM mpioperator/base (v0.6.0 build/base/Dockerfile): its /etc/ssh is that
image's (``Port 2222`` for sshd and ssh, ``StrictHostKeyChecking no``, ``UserKnownHostsFile /dev/null``,
``StrictModes no``) with, added by the harness, ``ListenAddress <pod address>`` (the pods share this machine's
network), ``PidFile none`` and a throwaway host key. The launcher is started once every worker's container has
started (AtStartup would start it at once; ssh's ConnectionAttempts=10 covers the gap on a cluster).
"""

from __future__ import annotations

import base64
import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.kubelet.container import Mount
from tests.kubelet.controllers import Controller, suffix
from tests.kubelet.network import dns_forms
from tests.kubelet.pods import Pod
from tests.kubelet.report import Outcome

SSH_PORT = 2222
_IF_EXCLUDE = re.compile(r"(-{1,2}mca\s+)(btl|oob)_tcp_if_exclude(\s+)(\S+)")


def _ssh_config_dir(where: Path, address: str) -> Path:
    """The image's /etc/ssh for one pod (mpioperator/base's edits of Debian's files, plus the harness's lines)."""
    where.mkdir(parents=True, exist_ok=True)
    for kind in ("ed25519",):
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(where / f"ssh_host_{kind}_key")],
                       check=True, capture_output=True)
    (where / "ssh_config").write_text(f"Host *\n    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n"
                                      f"    Port {SSH_PORT}\n    SendEnv LANG LC_*\n")
    (where / "sshd_config").write_text(
        f"Port {SSH_PORT}\nStrictModes no\nKbdInteractiveAuthentication no\nUsePAM no\nX11Forwarding no\n"
        "PrintMotd no\nAcceptEnv LANG LC_*\nSubsystem sftp /usr/lib/openssh/sftp-server\n"
        f"# added by the harness: the pods share this machine's network\nListenAddress {address}\n"
        f"HostKey /etc/ssh/ssh_host_ed25519_key\nPidFile none\n")
    return where


class MPIJobController(Controller):
    kind = "MPIJob"

    def __init__(self, obj: dict[str, Any], cluster: Any) -> None:
        super().__init__(obj, cluster)
        self.spec = obj["spec"]
        self.slots = int(self.spec.get("slotsPerWorker", 1))
        self.ssh_path = str(self.spec.get("sshAuthMountPath") or "/root/.ssh")
        if (self.spec.get("mpiImplementation") or "OpenMPI") != "OpenMPI":
            raise ValueError(f"{self.workload}: only mpiImplementation OpenMPI is covered by the harness")
        specs = self.spec["mpiReplicaSpecs"]
        self.workers_spec = specs.get("Worker") or {"replicas": 0}
        self.launcher_spec = specs["Launcher"]
        self.backoff_limit = int((self.spec.get("runPolicy") or {}).get("backoffLimit", 6))
        self.launcher: Pod | None = None
        self.workers: list[Pod] = []
        self.worker_argv: list[str] = []

    def _objects(self) -> None:
        keydir = self.cluster.work_dir / "mpi" / self.name
        keydir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "", "-f",
                        str(keydir / "key")], check=True, capture_output=True)
        def b64(p):
            return (base64.b64encode(p.read_bytes()).decode())
        store = self.cluster.store
        store.add({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth",
                   "metadata": {"name": f"{self.name}-ssh", "namespace": self.namespace},
                   "data": {"ssh-privatekey": b64(keydir / "key"), "ssh-publickey": b64(keydir / "key.pub")}})
        replicas = int(self.workers_spec.get("replicas", 0))
        hostfile = "".join(f"{self.name}-worker-{i}.{self.name}.{self.namespace}.svc slots={self.slots}\n"
                           for i in range(replicas))
        discover = "#!/bin/sh\n" + "".join(f"echo {self.name}-worker-{i}.{self.name}.{self.namespace}.svc\n"
                                           for i in range(replicas))
        store.add({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": f"{self.name}-config", "namespace": self.namespace},
                   "data": {"hostfile": hostfile, "discover_hosts.sh": discover}})
        store.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": self.name, "namespace": self.namespace},
                   "spec": {"clusterIP": "None", "selector": {"training.kubeflow.org/job-name": self.name,
                                                               "training.kubeflow.org/operator-name": "mpi-operator"}}})

    def _ssh_volume(self, spec: dict[str, Any]) -> None:
        mode = 0o600 if self.ssh_path == "/root/.ssh" else None
        items = [{"key": "ssh-privatekey", "path": "id_rsa"}, {"key": "ssh-publickey", "path": "id_rsa.pub"},
                 {"key": "ssh-publickey", "path": "authorized_keys"}]
        secret: dict[str, Any] = {"secretName": f"{self.name}-ssh", "items": items}
        if mode is not None:
            secret["defaultMode"] = mode
        spec.setdefault("volumes", []).append({"name": "ssh-auth", "secret": secret})
        spec["containers"][0].setdefault("volumeMounts", []).append({"name": "ssh-auth", "mountPath": self.ssh_path})

    def _pod(self, role: str, template: dict[str, Any], name: str, hostname: str, index: int | None) -> Pod:
        labels = {"training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": self.name,
                  "training.kubeflow.org/job-role": role}
        if index is not None:
            labels["training.kubeflow.org/replica-index"] = str(index)
        obj = self.cluster.new_pod(template, name, self.namespace, labels, hostname=hostname, subdomain=self.name)
        etc_ssh = _ssh_config_dir(self.cluster.work_dir / "mpi" / self.name / f"etc-ssh-{hostname}",
                                  obj["status"]["podIP"])
        pod = Pod(obj, self.cluster, [Mount(etc_ssh, "/etc/ssh", True)])
        # the pod's DNS search <job>.<ns>.svc.cluster.local: the short hostname resolves too
        self.cluster.addresses.add(pod.ip, [hostname, *dns_forms(f"{hostname}.{self.name}", self.namespace)[1:]])
        return pod

    def start(self) -> None:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # the image's privilege separation directory
        self._objects()
        for index in range(int(self.workers_spec.get("replicas", 0))):
            template = copy.deepcopy(self.workers_spec["template"])
            container = template["spec"]["containers"][0]
            if not container.get("command") and not container.get("args"):
                container["command"] = ["/usr/sbin/sshd", "-De"]
            self.worker_argv = [*container.get("command", []), *container.get("args", [])]
            container.setdefault("env", []).append({"name": "K_MPI_JOB_ROLE", "value": "worker"})
            self._ssh_volume(template["spec"])
            name = f"{self.name}-worker-{index}"
            self.workers.append(self.launch(self._pod("worker", template, name, name, index)))

    def _launcher_template(self) -> dict[str, Any]:
        template = copy.deepcopy(self.launcher_spec["template"])
        container = template["spec"]["containers"][0]
        container.setdefault("env", []).extend([
            {"name": "K_MPI_JOB_ROLE", "value": "launcher"},
            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
            {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
            {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
            {"name": "OMPI_MCA_orte_set_default_slots", "value": str(self.slots)},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": ""}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""}])
        self._ssh_volume(template["spec"])
        template["spec"]["volumes"].append({"name": "mpi-job-config", "configMap": {
            "name": f"{self.name}-config", "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444},
                                                     {"key": "discover_hosts.sh", "path": "discover_hosts.sh",
                                                      "mode": 0o555}]}})
        container.setdefault("volumeMounts", []).append({"name": "mpi-job-config", "mountPath": "/etc/mpi"})
        for field in ("command", "args"):
            words = container.get(field) or []
            rewritten = [_IF_EXCLUDE.sub(lambda m: f"{m.group(1)}{m.group(2)}_tcp_if_include{m.group(3)}lo"
                                         if "lo" in m.group(4).split(",") else m.group(0), str(w)) for w in words]
            if rewritten != words:
                self.cluster.note(f"{self.workload}: the launcher's '-mca btl/oob_tcp_if_exclude lo,...' became "
                                  "'_tcp_if_include lo' (here every pod's address is on lo; on a cluster it is eth0)")
                container[field] = rewritten
        return template

    def _start_launcher(self) -> None:
        hostname = f"{self.name}-launcher"
        self.launcher = self.launch(self._pod("launcher", self._launcher_template(), f"{hostname}-{suffix()}",
                                              hostname, None))

    def _worker_hints(self) -> list[str]:
        hints = []
        for pod in self.workers:
            for name in pod.exited_containers():
                code = pod.containers[name].exit_code()
                hints.append(f"worker pod {pod.name} container {name} exited (code {code}) while the job ran: an "
                             f"MPIJob worker must keep serving ssh for mpirun; it ran: {' '.join(self.worker_argv)}")
        return hints

    def poll(self) -> Outcome | None:
        if self.launcher is None:
            failed = next((p for p in self.workers if p.phase == "Failed" and not p.containers), None)
            if failed is not None:
                return self.failed(failed, "a worker pod could not start")
            if all(p.running.is_set() or p.done.is_set() for p in self.workers):
                self._start_launcher()
            return None
        if self.launcher.phase == "Succeeded":
            return Outcome(True, self.workload, "Succeeded (the launcher completed)")
        if self.launcher.phase == "Failed":
            if self.may_restart(self.backoff_limit):
                self.launcher = self.restart(self.launcher)
                return None
            return self.failed(self.launcher, "Failed: the launcher failed", self._worker_hints())
        return None

    def timed_out(self, timeout: float) -> Outcome:
        """As for any workload, but naming the launcher (whose mpirun waits) once it exists."""
        if self.launcher is not None:
            self.pods.remove(self.launcher)
            self.pods.insert(0, self.launcher)
        return super().timed_out(timeout)

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.cluster.work_dir / "mpi" / self.name, ignore_errors=True)
