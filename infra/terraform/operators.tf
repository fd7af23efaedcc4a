# Workload operators the mlrecipe charts target: Kubeflow training operator (PyTorchJob v1),
# MPI operator (MPIJob v2beta1), KubeRay (RayJob / RayService / RayCluster v1), LeaderWorkerSet (v1).
# The first two ship kustomize manifests only, so they are applied with kubectl (server-side).

resource "terraform_data" "training_operator" {
  # The Kubeflow platform manifests bring their own training operator.
  count = var.kubeflow_platform_enabled ? 0 : 1

  triggers_replace = [
    module.eks.cluster_name,
    filesha256("${path.module}/../kustomize/training-operator/kustomization.yaml"),
  ]

  provisioner "local-exec" {
    command = "${local.kubectl_prefix} kubectl apply --server-side --force-conflicts -k ${path.module}/../kustomize/training-operator"
  }

  depends_on = [helm_release.cluster_autoscaler]
}

resource "terraform_data" "mpi_operator" {
  triggers_replace = [module.eks.cluster_name, var.mpi_operator_version]

  provisioner "local-exec" {
    command = "${local.kubectl_prefix} kubectl apply --server-side --force-conflicts -f https://raw.githubusercontent.com/kubeflow/mpi-operator/${var.mpi_operator_version}/deploy/v2beta1/mpi-operator.yaml"
  }

  depends_on = [terraform_data.training_operator, terraform_data.kubeflow_platform]
}

resource "helm_release" "kuberay_operator" {
  name             = "kuberay-operator"
  namespace        = "kuberay"
  create_namespace = true
  repository       = "https://ray-project.github.io/kuberay-helm/"
  chart            = "kuberay-operator"
  version          = local.chart_versions.kuberay_operator

  values = [yamlencode({
    nodeSelector = local.node_selector_system
  })]

  depends_on = [module.eks]
}

resource "helm_release" "lws" {
  name             = "lws"
  namespace        = "lws-system"
  create_namespace = true
  repository       = "oci://registry.k8s.io/lws/charts"
  chart            = "lws"
  version          = local.chart_versions.lws

  depends_on = [module.eks]
}
