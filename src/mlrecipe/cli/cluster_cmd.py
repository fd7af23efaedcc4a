"""``mlrecipe cluster``: cluster-creation helpers (``cluster eksctl`` writes an eksctl ClusterConfig)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

cluster_app = typer.Typer(
    name="cluster",
    help="Create the cluster a recipe runs on (eksctl manifests; Terraform lives in infra/terraform).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@cluster_app.command("eksctl")
def eksctl(
    name: Annotated[str, typer.Option("--name", help="Cluster name")],
    region: Annotated[str, typer.Option("--region", help="AWS region, e.g. us-west-2")],
    azs: Annotated[list[str], typer.Option("--az", help="Availability zone (repeat; at least 2)")],
    instance_type: Annotated[str, typer.Option("--instance-type", help="GPU instance type")] = "g5.48xlarge",
    nodes: Annotated[int, typer.Option("--nodes", help="Desired GPU nodes")] = 1,
    max_nodes: Annotated[int | None, typer.Option("--max-nodes", help="Maximum GPU nodes (default: --nodes)")] = None,
    efa: Annotated[
        bool | None, typer.Option("--efa/--no-efa", help="EFA on the GPU nodes (default: if the type supports it)")
    ] = None,
    reservation_id: Annotated[
        str | None, typer.Option("--reservation-id", help="On-demand capacity reservation or Capacity Block id")
    ] = None,
    capacity_block: Annotated[
        bool, typer.Option("--capacity-block", help="--reservation-id is a Capacity Block for ML")
    ] = False,
    auto_repair: Annotated[bool, typer.Option("--auto-repair", help="EKS node auto-repair on GPU nodes")] = False,
    gpu_az: Annotated[
        str | None, typer.Option("--gpu-az", help="AZ of the GPU node group (default: first --az)")
    ] = None,
    kubernetes_version: Annotated[str, typer.Option("--kubernetes-version", help="EKS version")] = "1.33",
    vpc_id: Annotated[str | None, typer.Option("--vpc-id", help="Use an existing VPC")] = None,
    subnets: Annotated[
        list[str] | None, typer.Option("--subnet", help="Existing private subnet, AZ=subnet-id (repeat)")
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write here instead of stdout")] = None,
) -> None:
    """Write an eksctl ClusterConfig: a system node group plus one (EFA) GPU node group.

    Example: mlrecipe cluster eksctl --name ml --region us-west-2 --az us-west-2a --az us-west-2b
    --instance-type p4de.24xlarge --nodes 2 --reservation-id cr-0123456789abcdef0 -o cluster.yaml
    """
    from mlrecipe.infra.eksctl import ClusterOptions, EksctlConfigError, parse_subnets, render_cluster_config

    try:
        opts = ClusterOptions(
            name=name,
            region=region,
            azs=list(azs),
            instance_type=instance_type,
            nodes=nodes,
            max_nodes=max_nodes,
            efa=efa,
            reservation_id=reservation_id,
            capacity_block=capacity_block,
            auto_repair=auto_repair,
            gpu_az=gpu_az,
            kubernetes_version=kubernetes_version,
            vpc_id=vpc_id,
            private_subnets=parse_subnets(list(subnets or [])),
        )
        text = render_cluster_config(opts, header=f"Written by: mlrecipe cluster eksctl (cluster {name})")
    except EksctlConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
    if output is None:
        sys.stdout.write(text)
        return
    output.write_text(text)
    print(f"wrote {output}; create the cluster with: eksctl create cluster -f {output}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    """Add the ``cluster`` command group to the ``mlrecipe`` app."""
    app.add_typer(cluster_app, name="cluster")
