"""The reference eksctl manifests shipped in ``infra/eksctl/``, as generator inputs.

Regenerate the files after changing the generator::

    python -m mlrecipe.infra.eksctl_examples infra/eksctl
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from mlrecipe.infra.eksctl import ClusterOptions, render_cluster_config

DEV = ClusterOptions(
    name="ml-g4dn-dev",
    region="us-west-2",
    azs=["us-west-2a", "us-west-2b"],
    instance_type="g4dn.12xlarge",
    nodes=1,
    max_nodes=2,
)

EXAMPLES: dict[str, tuple[str, ClusterOptions]] = {
    "g4dn-dev-new-vpc.yaml": ("Development cluster, new VPC: g4dn.12xlarge (4x T4) GPU nodes with EFA.", DEV),
    "g4dn-dev-existing-vpc.yaml": (
        "Development cluster in an existing VPC: replace the VPC and subnet ids with yours\n"
        "(private subnets with a NAT route, one per AZ).",
        replace(DEV, vpc_id="vpc-0123456789abcdef0",
                private_subnets={"us-west-2a": "subnet-0123456789abcdef0", "us-west-2b": "subnet-0123456789abcdef1"}),
    ),
    "p4de-odcr.yaml": (
        "p4de.24xlarge (8x A100 80GB) nodes with EFA from an on-demand capacity reservation.\n"
        "The GPU node group's AZ must be the reservation's AZ; replace the cr-... id with yours.",
        ClusterOptions(
            name="ml-p4de",
            region="us-east-1",
            azs=["us-east-1a", "us-east-1b"],
            instance_type="p4de.24xlarge",
            nodes=2,
            reservation_id="cr-0123456789abcdef0",
        ),
    ),
    "p5-capacity-block.yaml": (
        "p5.48xlarge (8x H100) nodes with EFA from a Capacity Block for ML (self-managed node group,\n"
        "market type capacity-block). Create it inside the block's time window; use the block's AZ and id.",
        ClusterOptions(
            name="ml-p5",
            region="us-east-2",
            azs=["us-east-2a", "us-east-2b"],
            instance_type="p5.48xlarge",
            nodes=2,
            reservation_id="cr-0123456789abcdef0",
            capacity_block=True,
        ),
    ),
    "g5-auto-repair.yaml": (
        "g5.48xlarge (8x A10G) nodes with EFA and EKS node auto-repair (unhealthy GPU nodes are replaced).",
        ClusterOptions(
            name="ml-g5",
            region="us-west-2",
            azs=["us-west-2a", "us-west-2b"],
            instance_type="g5.48xlarge",
            nodes=2,
            auto_repair=True,
        ),
    ),
}


def render_example(filename: str) -> str:
    """The exact text of one shipped manifest."""
    header, opts = EXAMPLES[filename]
    return render_cluster_config(opts, header=f"{header}\nCreate: eksctl create cluster -f infra/eksctl/{filename}")


def write_examples(directory: Path) -> list[Path]:
    """Write every shipped manifest into ``directory``; returns the paths."""
    paths = []
    for filename in EXAMPLES:
        path = directory / filename
        path.write_text(render_example(filename))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_examples(Path(sys.argv[1] if len(sys.argv) > 1 else "infra/eksctl")):
        print(written)
