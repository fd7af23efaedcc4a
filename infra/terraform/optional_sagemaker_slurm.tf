# Optional: ACK SageMaker controller, and Slurm on Kubernetes (SchedMD Slinky).

module "ack_sagemaker_pod_identity" {
  source  = "terraform-aws-modules/eks-pod-identity/aws"
  version = "2.6.0"

  create = var.ack_sagemaker_enabled

  name = "${var.cluster_name}-ack-sagemaker"
  additional_policy_arns = {
    AmazonSageMakerFullAccess = "arn:${local.partition}:iam::aws:policy/AmazonSageMakerFullAccess"
  }

  associations = {
    controller = {
      cluster_name    = module.eks.cluster_name
      namespace       = "ack-system"
      service_account = "ack-sagemaker-controller"
    }
  }

  tags = local.tags
}

resource "helm_release" "ack_sagemaker" {
  count = var.ack_sagemaker_enabled ? 1 : 0

  name             = "ack-sagemaker-controller"
  namespace        = "ack-system"
  create_namespace = true
  repository       = "oci://public.ecr.aws/aws-controllers-k8s"
  chart            = "sagemaker-chart"
  version          = local.chart_versions.ack_sagemaker

  values = [yamlencode({
    aws = {
      region = var.region
    }
    serviceAccount = {
      name = "ack-sagemaker-controller"
    }
  })]

  depends_on = [module.ack_sagemaker_pod_identity]
}

resource "helm_release" "slurm_operator" {
  count = var.slurm_enabled ? 1 : 0

  name             = "slurm-operator"
  namespace        = "slinky"
  create_namespace = true
  repository       = "oci://ghcr.io/slinkyproject/charts"
  chart            = "slurm-operator"
  version          = local.chart_versions.slinky

  depends_on = [helm_release.cert_manager, terraform_data.kubeflow_platform]
}

resource "helm_release" "slurm" {
  count = var.slurm_enabled ? 1 : 0

  name             = "slurm"
  namespace        = "slurm"
  create_namespace = true
  repository       = "oci://ghcr.io/slinkyproject/charts"
  chart            = "slurm"
  version          = local.chart_versions.slinky

  depends_on = [helm_release.slurm_operator, helm_release.ml_platform]
}
