"""SageMaker's local mode: a SageMaker API emulator that runs training jobs and endpoints on this machine.

:class:`~.client.LocalSageMakerClient` answers the boto3 SageMaker client's calls; training jobs
(:mod:`.training`, run by :mod:`.supervisor`, a node that outlives its starter: its hosts one node group of the host
layer, :mod:`mlrecipe.backends.host.nodes`, each in private namespaces; their temporary directories: :mod:`.processes`;
SageMaker's ``/opt/ml`` tree (:mod:`.tree`), channels staged (:mod:`.channels`)) and endpoints (:mod:`.hosting`,
:mod:`.model_server`, model archives: :mod:`.archive`), their typed records (a dataclass and a status enum each:
:mod:`.job`, :mod:`.endpoint`) kept as JSON under a root (:mod:`.store`). Devices come from the host layer's device
grant (:mod:`mlrecipe.backends.host.grant`). This package imports nothing heavy at import
time: the supervisor starts without pydantic or the spec.
"""
