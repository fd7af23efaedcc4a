# Workload operators the mlrecipe charts target: Kubeflow training operator (PyTorchJob v1) or, with
# training_api = "v2", Kubeflow Trainer v2 (TrainJob) with JobSet,
# MPI operator (MPIJob v2beta1), KubeRay (RayJob / RayService / RayCluster v1), LeaderWorkerSet (v1).
# The first two ship kustomize manifests only, so they are applied with kubectl (server-side).

resource "terraform_data" "training_operator" {
  # The Kubeflow platform manifests bring their own training operator; training_api = "v2" installs Trainer v2.
  count = var.kubeflow_platform_enabled || var.training_api != "v1" ? 0 : 1

  triggers_replace = [
    module.eks.cluster_name,
    filesha256("${path.module}/../kustomize/training-operator/kustomization.yaml"),
  ]

  provisioner "local-exec" {
    command = "${local.kubectl_prefix} kubectl apply --server-side --force-conflicts -k ${path.module}/../kustomize/training-operator"
  }

  depends_on = [helm_release.cluster_autoscaler]
}

# Kubeflow Trainer v2 (TrainJob) and JobSet instead of the training operator, then its ClusterTrainingRuntimes once
# the controller's webhook is available.
resource "terraform_data" "trainer_v2" {
  count = var.kubeflow_platform_enabled || var.training_api != "v2" ? 0 : 1

  triggers_replace = [
    module.eks.cluster_name,
    filesha256("${path.module}/../kustomize/trainer-v2/kustomization.yaml"),
    filesha256("${path.module}/../kustomize/trainer-v2/runtimes/kustomization.yaml"),
  ]

  provisioner "local-exec" {
    command = join(" && ", [
      "${local.kubectl_prefix} kubectl apply --server-side --force-conflicts -k ${path.module}/../kustomize/trainer-v2",
      "${local.kubectl_prefix} kubectl -n kubeflow-system wait --for=condition=Available --timeout=600s deployment/kubeflow-trainer-controller-manager",
      "${local.kubectl_prefix} kubectl apply --server-side --force-conflicts -k ${path.module}/../kustomize/trainer-v2/runtimes",
    ])
  }

  depends_on = [helm_release.cluster_autoscaler]
}

resource "terraform_data" "mpi_operator" {
  triggers_replace = [module.eks.cluster_name, var.mpi_operator_version]

  provisioner "local-exec" {
    command = "${local.kubectl_prefix} kubectl apply --server-side --force-conflicts -f https://raw.githubusercontent.com/kubeflow/mpi-operator/${var.mpi_operator_version}/deploy/v2beta1/mpi-operator.yaml"
  }

  depends_on = [terraform_data.training_operator, terraform_data.trainer_v2, terraform_data.kubeflow_platform]
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
