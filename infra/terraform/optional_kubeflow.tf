# Optional: the Kubeflow platform, KServe, and cert-manager when something needs it.

resource "terraform_data" "kubeflow_platform" {
  count = var.kubeflow_platform_enabled ? 1 : 0

  triggers_replace = [module.eks.cluster_name, var.kubeflow_manifests_version]

  # kubeflow/manifests documents a retry loop: CRDs and webhooks become ready while it applies.
  provisioner "local-exec" {
    command = "${local.kubectl_prefix} sh -c 'for i in $(seq 1 30); do kubectl apply --server-side --force-conflicts -k \"https://github.com/kubeflow/manifests.git/example?ref=${var.kubeflow_manifests_version}\" && exit 0; sleep 20; done; exit 1'"
  }

  depends_on = [helm_release.ml_platform, helm_release.cluster_autoscaler]
}

resource "helm_release" "cert_manager" {
  count = local.cert_manager_needed ? 1 : 0

  name             = "cert-manager"
  namespace        = "cert-manager"
  create_namespace = true
  repository       = "https://charts.jetstack.io"
  chart            = "cert-manager"
  version          = local.chart_versions.cert_manager

  values = [yamlencode({
    crds = {
      enabled = true
    }
  })]

  depends_on = [module.eks]
}

resource "helm_release" "kserve_crd" {
  count = var.kserve_enabled ? 1 : 0

  name             = "kserve-crd"
  namespace        = "kserve"
  create_namespace = true
  repository       = "oci://ghcr.io/kserve/charts"
  chart            = "kserve-crd"
  version          = local.chart_versions.kserve

  depends_on = [helm_release.cert_manager, terraform_data.kubeflow_platform]
}

resource "helm_release" "kserve" {
  count = var.kserve_enabled ? 1 : 0

  name       = "kserve"
  namespace  = "kserve"
  repository = "oci://ghcr.io/kserve/charts"
  chart      = "kserve"
  version    = local.chart_versions.kserve

  # Raw deployment mode: plain Deployments and Services, no Knative or Istio required.
  values = [yamlencode({
    kserve = {
      controller = {
        deploymentMode = "RawDeployment"
      }
    }
  })]

  depends_on = [helm_release.kserve_crd]
}
