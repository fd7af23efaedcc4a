# Device plugins: NVIDIA GPUs, EFA, and AWS Neuron (with the Neuron scheduler extension).
# Karpenter labels its nodes with karpenter.k8s.aws/instance-gpu-manufacturer, so the NVIDIA plugin
# needs no Node Feature Discovery.

resource "helm_release" "nvidia_device_plugin" {
  name       = "nvidia-device-plugin"
  namespace  = "kube-system"
  repository = "https://nvidia.github.io/k8s-device-plugin"
  chart      = "nvidia-device-plugin"
  version    = local.chart_versions.nvidia_device_plugin

  values = [yamlencode({
    tolerations = local.accelerator_tolerations
    affinity = {
      nodeAffinity = {
        requiredDuringSchedulingIgnoredDuringExecution = {
          nodeSelectorTerms = [{
            matchExpressions = [{
              key      = "karpenter.k8s.aws/instance-gpu-manufacturer"
              operator = "In"
              values   = ["nvidia"]
            }]
          }]
        }
      }
    }
  })]

  depends_on = [module.eks]
}

resource "helm_release" "efa_device_plugin" {
  name       = "aws-efa-k8s-device-plugin"
  namespace  = "kube-system"
  repository = "https://aws.github.io/eks-charts"
  chart      = "aws-efa-k8s-device-plugin"
  version    = local.chart_versions.aws_efa_k8s_device_plugin

  values = [yamlencode({
    tolerations = local.accelerator_tolerations
    supportedInstanceLabels = {
      keys   = ["node.kubernetes.io/instance-type"]
      values = distinct(concat(var.cuda_efa_instance_types, ["trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge"]))
    }
  })]

  depends_on = [module.eks]
}

resource "helm_release" "neuron" {
  name       = "neuron-helm-chart"
  namespace  = "kube-system"
  repository = "oci://public.ecr.aws/neuron"
  chart      = "neuron-helm-chart"
  version    = local.chart_versions.neuron

  values = [yamlencode({
    devicePlugin = {
      enabled = true
    }
    scheduler = {
      enabled = true
    }
    npd = {
      enabled = false
    }
  })]

  depends_on = [module.eks]
}
