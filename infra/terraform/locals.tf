locals {
  tags = merge(var.tags, {
    "mlrecipe.io/cluster" = var.cluster_name
    "managed-by"          = "terraform"
  })

  partition = data.aws_partition.current.partition

  # Private /18 subnets (room for VPC CNI pod IPs), small public and control-plane subnets.
  private_subnets = [for i, az in var.azs : cidrsubnet(var.vpc_cidr, 2, i)]
  public_subnets  = [for i, az in var.azs : cidrsubnet(var.vpc_cidr, 8, 192 + i)]
  intra_subnets   = [for i, az in var.azs : cidrsubnet(var.vpc_cidr, 8, 200 + i)]

  # EFA and Neuron nodes go to one AZ each (EFA needs all nodes of a job in one placement).
  cuda_efa_az = var.cuda_efa_az != "" ? var.cuda_efa_az : var.azs[0]
  neuron_az   = var.neuron_az != "" ? var.neuron_az : var.azs[0]

  # FSx for Lustre lives in the EFA AZ, next to the GPUs that read it.
  fsx_subnet_id = module.vpc.private_subnets[index(var.azs, local.cuda_efa_az)]

  node_selector_system = { "mlrecipe.io/node-class" = "system" }

  # Taints the accelerator NodePools set; DaemonSets that must run there tolerate them.
  accelerator_tolerations = [
    { key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" },
    { key = "vpc.amazonaws.com/efa", operator = "Exists", effect = "NoSchedule" },
    { key = "aws.amazon.com/neuron", operator = "Exists", effect = "NoSchedule" },
  ]

  # Pinned Helm chart versions; override any of them with var.chart_versions.
  default_chart_versions = {
    karpenter                 = "1.13.1"
    cluster_autoscaler        = "9.46.6"
    aws_fsx_csi_driver        = "1.11.0"
    nvidia_device_plugin      = "0.17.1"
    aws_efa_k8s_device_plugin = "v0.5.6"
    neuron                    = "1.1.1"
    kuberay_operator          = "1.5.2"
    lws                       = "0.8.0"
    kube_prometheus_stack     = "75.6.0"
    dcgm_exporter             = "4.1.1"
    kueue                     = "0.12.3"
    cert_manager              = "v1.17.2"
    kserve                    = "v0.15.0"
    airflow                   = "1.16.0"
    ack_sagemaker             = "1.2.16"
    slinky                    = "0.3.0"
    mlflow                    = "1.0.1"
  }
  chart_versions = merge(local.default_chart_versions, var.chart_versions)

  # kubectl-based installs (projects that ship kustomize manifests, not Helm charts) use a private
  # kubeconfig written by the AWS CLI, so they never touch the user's current context.
  kubeconfig_path = "${path.module}/.kubeconfig-${var.cluster_name}"
  kubectl_prefix  = "aws eks update-kubeconfig --region ${var.region} --name ${module.eks.cluster_name} --kubeconfig ${local.kubeconfig_path} >/dev/null && KUBECONFIG=${local.kubeconfig_path}"

  cert_manager_needed = (var.kserve_enabled || var.slurm_enabled) && !var.kubeflow_platform_enabled
}
