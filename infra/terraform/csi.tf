# CSI drivers. EBS and EFS come as EKS add-ons (eks.tf); FSx for Lustre from its Helm chart.
# Storage classes, the pv-efs / pv-fsx volumes and their claims come from the ml-platform chart.

resource "helm_release" "fsx_csi" {
  name       = "aws-fsx-csi-driver"
  namespace  = "kube-system"
  repository = "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
  chart      = "aws-fsx-csi-driver"
  version    = local.chart_versions.aws_fsx_csi_driver

  values = [yamlencode({
    controller = {
      nodeSelector = local.node_selector_system
      serviceAccount = {
        name = "fsx-csi-controller-sa"
      }
    }
    node = {
      # The node plugin must run on tainted GPU / Neuron nodes too.
      tolerateAllTaints = true
    }
  })]

  depends_on = [module.eks, module.fsx_csi_pod_identity]
}
