"""Write eksctl ``ClusterConfig`` manifests (eksctl.io/v1alpha5) for GPU clusters.

Every config has a system managed node group and one GPU node group in a single AZ, optionally
EFA-enabled, launched into an on-demand capacity reservation or a Capacity Block for ML, and
optionally with EKS node auto-repair. The shipped manifests under ``infra/eksctl/`` are written by
this module (tests regenerate and compare them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mlrecipe.errors import EksctlConfigError

API_VERSION = "eksctl.io/v1alpha5"
DEFAULT_KUBERNETES_VERSION = "1.33"
SYSTEM_INSTANCE_TYPES = ["m7a.xlarge", "m6a.xlarge", "m5.xlarge"]

# Instance types that support EFA (families whose every listed size supports it, or exact types).
_EFA_TYPES = {
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "trn1.32xlarge",
    "trn1n.32xlarge",
    "trn2.48xlarge",
    "g4dn.8xlarge",
    "g4dn.12xlarge",
    "g4dn.16xlarge",
    "g4dn.metal",
    "g5.8xlarge",
    "g5.12xlarge",
    "g5.16xlarge",
    "g5.24xlarge",
    "g5.48xlarge",
    "g6.8xlarge",
    "g6.12xlarge",
    "g6.16xlarge",
    "g6.24xlarge",
    "g6.48xlarge",
    "g6e.8xlarge",
    "g6e.12xlarge",
    "g6e.16xlarge",
    "g6e.24xlarge",
    "g6e.48xlarge",
}
_NEURON_PREFIXES = ("trn", "inf")
_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9-]{0,99}$")



def supports_efa(instance_type: str) -> bool:
    """Whether ``instance_type`` can attach EFA interfaces."""
    return instance_type in _EFA_TYPES


@dataclass
class ClusterOptions:
    """What ``mlrecipe cluster eksctl`` asks for."""

    name: str
    region: str
    azs: list[str]
    instance_type: str = "g5.48xlarge"
    nodes: int = 1
    max_nodes: int | None = None
    efa: bool | None = None  # None: on when the instance type supports EFA
    reservation_id: str | None = None
    capacity_block: bool = False
    auto_repair: bool = False
    gpu_az: str | None = None
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    vpc_id: str | None = None
    private_subnets: dict[str, str] = field(default_factory=dict)
    gpu_volume_size: int = 500
    system_instance_types: list[str] = field(default_factory=lambda: list(SYSTEM_INSTANCE_TYPES))
    tags: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise :class:`EksctlConfigError` naming the first problem."""
        if not _NAME.match(self.name):
            raise EksctlConfigError(f"cluster name {self.name!r}: letters, digits and '-', starting with a letter")
        if not _REGION.match(self.region):
            raise EksctlConfigError(f"region {self.region!r} is not an AWS region code")
        if len(self.azs) < 2 or len(set(self.azs)) != len(self.azs):
            raise EksctlConfigError("give at least 2 distinct availability zones (--az twice): EKS needs two")
        for az in self.azs:
            if not az.startswith(self.region):
                raise EksctlConfigError(f"availability zone {az} is not in region {self.region}")
        if self.gpu_az is not None and self.gpu_az not in self.azs:
            raise EksctlConfigError(f"--gpu-az {self.gpu_az} must be one of the --az values")
        if self.nodes < 0 or (self.max_nodes is not None and self.max_nodes < max(self.nodes, 1)):
            raise EksctlConfigError("node counts: need 0 <= nodes <= max-nodes and max-nodes >= 1")
        if self.efa and not supports_efa(self.instance_type):
            raise EksctlConfigError(f"{self.instance_type} does not support EFA; drop --efa or pick an EFA type")
        if self.reservation_id is not None and not re.fullmatch(r"cr-[0-9a-z]+", self.reservation_id):
            raise EksctlConfigError(f"reservation id {self.reservation_id!r} must look like cr-0123456789abcdef0")
        if self.capacity_block and self.reservation_id is None:
            raise EksctlConfigError("--capacity-block needs --reservation-id (the Capacity Block's cr-... id)")
        if self.capacity_block and self.auto_repair:
            raise EksctlConfigError("Capacity Block node groups are self-managed here; node auto-repair needs managed")
        if self.vpc_id is not None:
            missing = [az for az in self.azs if az not in self.private_subnets]
            if missing:
                raise EksctlConfigError(f"existing VPC: give --subnet AZ=subnet-id for {', '.join(missing)}")
        elif self.private_subnets:
            raise EksctlConfigError("--subnet needs --vpc-id (subnets of an existing VPC)")

    @property
    def efa_enabled(self) -> bool:
        return supports_efa(self.instance_type) if self.efa is None else self.efa


def _gpu_taints(instance_type: str, efa: bool) -> list[dict[str, str]]:
    key = "aws.amazon.com/neuron" if instance_type.startswith(_NEURON_PREFIXES) else "nvidia.com/gpu"
    taints = [{"key": key, "value": "true", "effect": "NoSchedule"}]
    if efa:
        taints.append({"key": "vpc.amazonaws.com/efa", "value": "true", "effect": "NoSchedule"})
    return taints


def _addon_policies() -> dict[str, bool]:
    return {"autoScaler": True, "ebs": True, "efs": True, "fsx": True, "cloudWatch": True}


def build_cluster_config(opts: ClusterOptions) -> dict[str, Any]:
    """The ClusterConfig for ``opts`` as a plain dict (ready for yaml.safe_dump)."""
    opts.validate()
    gpu_az = opts.gpu_az or opts.azs[0]
    efa = opts.efa_enabled
    tags = {"mlrecipe.io/cluster": opts.name, **opts.tags}
    config: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "ClusterConfig",
        "metadata": {"name": opts.name, "region": opts.region, "version": opts.kubernetes_version, "tags": tags},
    }
    if opts.vpc_id is None:
        config["availabilityZones"] = list(opts.azs)
        config["vpc"] = {"cidr": "192.168.0.0/16", "nat": {"gateway": "Single"}}
    else:
        config["vpc"] = {
            "id": opts.vpc_id,
            "subnets": {"private": {az: {"id": opts.private_subnets[az]} for az in opts.azs}},
        }
    config["iam"] = {"withOIDC": True}
    # Addons that need AWS permissions (EBS / EFS CSI) get them through EKS Pod Identity.
    config["addonsConfig"] = {"autoApplyPodIdentityAssociations": True}
    config["addons"] = [
        {"name": name}
        for name in (
            "vpc-cni",
            "coredns",
            "kube-proxy",
            "eks-pod-identity-agent",
            "aws-ebs-csi-driver",
            "aws-efs-csi-driver",
        )
    ]
    system = {
        "name": "system",
        "instanceTypes": list(opts.system_instance_types),
        "minSize": 1,
        "desiredCapacity": 2,
        "maxSize": 8,
        "volumeSize": 100,
        "privateNetworking": True,
        "labels": {"mlrecipe.io/node-class": "system"},
        "iam": {"withAddonPolicies": _addon_policies()},
    }
    desired = opts.nodes
    gpu: dict[str, Any] = {
        "name": "gpu-efa" if efa else "gpu",
        "instanceType": opts.instance_type,
        "availabilityZones": [gpu_az],
        "minSize": 0,
        "desiredCapacity": desired,
        "maxSize": opts.max_nodes if opts.max_nodes is not None else max(desired, 1),
        "volumeSize": opts.gpu_volume_size,
        "privateNetworking": True,
        "efaEnabled": efa,
        "labels": {"mlrecipe.io/node-class": "gpu-efa" if efa else "gpu"},
        "taints": _gpu_taints(opts.instance_type, efa),
        "iam": {"withAddonPolicies": _addon_policies()},
    }
    if opts.reservation_id is not None:
        gpu["capacityReservation"] = {"capacityReservationTarget": {"capacityReservationID": opts.reservation_id}}
    if opts.auto_repair:
        gpu["nodeRepairConfig"] = {"enabled": True}
    if opts.capacity_block:
        # Capacity Blocks launch through a self-managed node group with the capacity-block market type.
        gpu["instanceMarketOptions"] = {"marketType": "capacity-block"}
        config["managedNodeGroups"] = [system]
        config["nodeGroups"] = [gpu]
    else:
        config["managedNodeGroups"] = [system, gpu]
    return config


def render_cluster_config(opts: ClusterOptions, header: str | None = None) -> str:
    """YAML text of :func:`build_cluster_config`, with an optional comment header."""
    import yaml

    body = yaml.safe_dump(build_cluster_config(opts), sort_keys=False, default_flow_style=False)
    if not header:
        return body
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.strip().splitlines())
    return comment + body


def parse_subnets(items: list[str]) -> dict[str, str]:
    """``["us-west-2a=subnet-1", ...]`` -> ``{"us-west-2a": "subnet-1"}``."""
    out: dict[str, str] = {}
    for item in items:
        az, sep, subnet = item.partition("=")
        if not sep or not az or not re.fullmatch(r"subnet-[0-9a-f]+", subnet):
            raise EksctlConfigError(f"--subnet {item!r}: expected AZ=subnet-0123abcd")
        out[az] = subnet
    return out
