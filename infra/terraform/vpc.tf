module "vpc" {
  source  = "terraform-aws-modules/vpc/aws"
  version = "6.0.1"

  name = "${var.cluster_name}-vpc"
  cidr = var.vpc_cidr

  azs             = var.azs
  private_subnets = local.private_subnets
  public_subnets  = local.public_subnets
  intra_subnets   = local.intra_subnets

  enable_nat_gateway     = true
  single_nat_gateway     = var.single_nat_gateway
  one_nat_gateway_per_az = !var.single_nat_gateway
  enable_dns_hostnames   = true
  enable_dns_support     = true

  public_subnet_tags = {
    "kubernetes.io/role/elb" = "1"
  }

  # All private subnets are discoverable by Karpenter (CUDA and CPU pools); the EFA and Neuron pools
  # select only the subnet of their single AZ through the extra per-AZ tags.
  private_subnet_tags = {
    "kubernetes.io/role/internal-elb" = "1"
    "karpenter.sh/discovery"          = var.cluster_name
  }

  private_subnet_tags_per_az = {
    for az in var.azs : az => merge(
      az == local.cuda_efa_az ? { "karpenter.sh/discovery/cuda-efa" = var.cluster_name } : {},
      az == local.neuron_az ? { "karpenter.sh/discovery/neuron" = var.cluster_name } : {},
    )
  }

  tags = local.tags
}
