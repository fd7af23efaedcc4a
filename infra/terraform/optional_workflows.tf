# Optional: Kueue (queueing), Apache Airflow (workflows), MLflow (tracking).

resource "helm_release" "kueue" {
  count = var.kueue_enabled ? 1 : 0

  name             = "kueue"
  namespace        = "kueue-system"
  create_namespace = true
  repository       = "oci://registry.k8s.io/kueue/charts"
  chart            = "kueue"
  version          = local.chart_versions.kueue

  depends_on = [module.eks]
}

resource "helm_release" "airflow" {
  count = var.airflow_enabled ? 1 : 0

  name             = "airflow"
  namespace        = "airflow"
  create_namespace = true
  repository       = "https://airflow.apache.org"
  chart            = "airflow"
  version          = local.chart_versions.airflow

  values = [yamlencode({
    executor = "KubernetesExecutor"
  })]

  depends_on = [helm_release.ml_platform]
}

resource "helm_release" "mlflow" {
  count = var.mlflow_enabled ? 1 : 0

  name             = "mlflow"
  namespace        = "mlflow"
  create_namespace = true
  repository       = "https://community-charts.github.io/helm-charts"
  chart            = "mlflow"
  version          = local.chart_versions.mlflow

  depends_on = [helm_release.ml_platform]
}
