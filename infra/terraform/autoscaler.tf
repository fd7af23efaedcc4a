# Cluster Autoscaler scales the system managed node group (Karpenter handles accelerator nodes).

resource "helm_release" "cluster_autoscaler" {
  name       = "cluster-autoscaler"
  namespace  = "kube-system"
  repository = "https://kubernetes.github.io/autoscaler"
  chart      = "cluster-autoscaler"
  version    = local.chart_versions.cluster_autoscaler

  values = [yamlencode({
    cloudProvider = "aws"
    awsRegion     = var.region
    autoDiscovery = {
      clusterName = module.eks.cluster_name
    }
    rbac = {
      serviceAccount = {
        name = "cluster-autoscaler"
      }
    }
    nodeSelector = local.node_selector_system
    extraArgs = {
      "balance-similar-node-groups"   = true
      "expander"                      = "least-waste"
      "skip-nodes-with-local-storage" = false
      "skip-nodes-with-system-pods"   = false
    }
  })]

  depends_on = [module.eks, module.cluster_autoscaler_pod_identity]
}
