# Prometheus (on by default) and the NVIDIA DCGM exporter (optional).

resource "helm_release" "kube_prometheus_stack" {
  count = var.prometheus_enabled ? 1 : 0

  name             = "kube-prometheus-stack"
  namespace        = "monitoring"
  create_namespace = true
  repository       = "https://prometheus-community.github.io/helm-charts"
  chart            = "kube-prometheus-stack"
  version          = local.chart_versions.kube_prometheus_stack

  values = [yamlencode({
    prometheus = {
      prometheusSpec = {
        # Scrape every ServiceMonitor / PodMonitor, not only this release's.
        serviceMonitorSelectorNilUsesHelmValues = false
        podMonitorSelectorNilUsesHelmValues     = false
        nodeSelector                            = local.node_selector_system
      }
    }
  })]

  depends_on = [module.eks]
}

resource "helm_release" "dcgm_exporter" {
  count = var.dcgm_exporter_enabled ? 1 : 0

  name             = "dcgm-exporter"
  namespace        = "monitoring"
  create_namespace = true
  repository       = "https://nvidia.github.io/dcgm-exporter/helm-charts"
  chart            = "dcgm-exporter"
  version          = local.chart_versions.dcgm_exporter

  values = [yamlencode({
    tolerations = local.accelerator_tolerations
    serviceMonitor = {
      enabled = var.prometheus_enabled
    }
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

  depends_on = [helm_release.kube_prometheus_stack]
}
