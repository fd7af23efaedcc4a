# Karpenter: AWS side (controller role, node role, interruption queue) from the EKS module's
# karpenter submodule; the controller from its Helm chart. NodePools and EC2NodeClasses come from
# infra/charts/ml-platform (platform.tf).

module "karpenter" {
  source  = "terraform-aws-modules/eks/aws//modules/karpenter"
  version = "21.4.0"

  cluster_name = module.eks.cluster_name
  namespace    = "kube-system"

  node_iam_role_use_name_prefix = false
  node_iam_role_name            = "${var.cluster_name}-karpenter-node"
  node_iam_role_additional_policies = {
    AmazonSSMManagedInstanceCore = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
  }

  tags = local.tags
}

resource "helm_release" "karpenter" {
  name       = "karpenter"
  namespace  = "kube-system"
  repository = "oci://public.ecr.aws/karpenter"
  chart      = "karpenter"
  version    = local.chart_versions.karpenter
  wait       = true

  values = [yamlencode({
    dnsPolicy    = "Default"
    nodeSelector = local.node_selector_system
    serviceAccount = {
      name = module.karpenter.service_account
    }
    settings = {
      clusterName       = module.eks.cluster_name
      clusterEndpoint   = module.eks.cluster_endpoint
      interruptionQueue = module.karpenter.queue_name
      featureGates = {
        reservedCapacity = true
      }
    }
    webhook = {
      enabled = false
    }
  })]

  depends_on = [module.eks]
}
