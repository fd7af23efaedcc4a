"""A kubelet and operators for rendered manifests, on this machine (test tree only; ``src/`` never imports it).

``python -m tests.kubelet RENDERED.yaml`` reads the stream ``mlrecipe template ... -b kubernetes`` or ``mlrecipe run
... --dry-run -b kubernetes`` prints, creates what the controllers would create and runs every pod's containers as
processes here: each container in its own mount, UTS and PID namespaces (``unshare``, as root) with the pod's
hostname, an ``/etc/hosts`` resolving the pod's names and those of the Services to each pod's own loopback address
127.0.0.N, its ConfigMaps and Secrets materialised (volumes with items and modes, ``secretKeyRef``,
``configMapKeyRef``, ``envFrom``), PVCs as directories shared by the run, ``emptyDir`` fresh per pod, a fresh
/tmp, /var/tmp and /root (the image's writable layer; what of this machine stands for the image and lies there,
pyenv's Python under /root or a checkout under /tmp, is mounted back over them), init containers first,
``command``/``args`` with ``$(VAR)`` expansion, the image's ENTRYPOINT/CMD from a small table
(:mod:`tests.kubelet.images`) when the container has no command.

Covered kinds: batch ``Job`` (:mod:`.controllers.job`), ``PyTorchJob`` v1 as training-operator v1.9
(:mod:`.controllers.pytorchjob`), ``MPIJob`` v2beta1 as mpi-operator v0.6.0 with real sshd on the workers and real
ssh from the launcher's ``mpirun`` (:mod:`.controllers.mpijob`), ``Deployment`` with its ``Service`` and readiness
probes (:mod:`.controllers.deployment`), ``TrainJob`` as Kubeflow Trainer v2.3.0 and JobSet on its
``torch-distributed`` runtime (:mod:`.controllers.trainjob`), ``RayJob``, ``RayService`` and ``RayCluster`` as
KubeRay v1.5.2 (the RayCluster's head and worker pods with KubeRay's ``ray start`` commands and env; a RayJob's
submitter Job running ``ray job submit`` against the real dashboard, a RayService's ``serveConfigV2`` put to the
dashboard's Serve API: :mod:`.controllers.rayjob`, :mod:`.controllers.rayservice`, :mod:`.controllers.raycluster`,
where what they do more simply is listed), ``LeaderWorkerSet`` as lws v0.8.0 (leader and worker pods per group,
the headless Service, the ``LWS_*`` env, startupPolicy, Available as lws counts it: :mod:`.controllers.lws`).
Not covered (the run exits 1 naming the kind, before anything starts): ``StatefulSet``, ``DaemonSet``, bare
``Pod``. Not acted on (said in a note):
HorizontalPodAutoscaler, PodDisruptionBudget, RBAC, Kueue objects, PVCs.

Knowingly simpler than a cluster:

- one network namespace for every pod (this machine's): each pod binds its own 127.0.0.N, but a pod that binds
  0.0.0.0 takes the port for all; the MPI launcher's ``-mca btl/oob_tcp_if_exclude lo,...`` becomes
  ``_tcp_if_include lo`` (said in a note); no NetworkPolicy; for the same reason two harness runs on one machine
  take turns (an exclusive lock), as two clusters' pods could not share addresses and ports;
- no cluster DNS: names are lines of each pod's ``/etc/hosts``, written when the pod starts (names of pods created
  later are unknown to it); the MPI pods' DNS search domain is modelled by their short hostnames; a Service name
  resolves to one selected pod (no kube-proxy, no load balancing, a port other than targetPort not forwarded);
- no images: each maps to a Python environment of this checkout (plus, for NeMo's, a ``torchrun`` script its
  environment lacks: ``image_bin/``) and, for a container without a command, to the ENTRYPOINT/CMD in the
  table; the machine's /usr and /etc are the image's, except /etc/hosts, /etc/hostname and,
  for MPIJob pods, /etc/ssh (mpioperator/base's configuration); no ``securityContext``, users or capabilities (all
  run as root); ``workingDir`` as given, else /;
- requests and limits are not enforced; GPU, EFA and Neuron requests are dropped (said in a note);
  ``resourceFieldRef`` env is "0"; ``emptyDir`` with ``medium: Memory`` (/dev/shm) is a plain fresh directory;
  ConfigMap/Secret files are plain files (no ``..data`` symlinks, no live updates);
- a ConfigMap or Secret that is missing fails the pod at once (a cluster keeps it Pending, retrying the mount);
- restarts: a failed pod is started again (same name and address) only up to ``--max-restarts`` (default 0), under
  the workload's ``backoffLimit``; no backoff delay; liveness and startup probes are not run; readiness probes run at
  most 2 s apart; containers are stopped with SIGTERM then SIGKILL after 3 s (not terminationGracePeriodSeconds);
- the MPI launcher starts once every worker's container has started (AtStartup); no scheduling, node selectors,
  tolerations, topology spread, Kueue or HyperPod behaviour.

Mount points missing on this machine (/fsx, /efs, /etc/mlrecipe) are created for the run and removed, if empty, by
the last run that used them (:mod:`tests.kubelet.mountpoints`). Every container's process tree is killed at the end,
on a timeout and on Ctrl-C (:mod:`tests.kubelet.container`).
"""
