################################################################################
# Cluster and network
################################################################################

variable "region" {
  description = "AWS region of the cluster, for example the one in terraform.tfvars.example."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must be an AWS region code such as <geo>-<area>-<n>."
  }
}

variable "cluster_name" {
  description = "Unique name of the EKS cluster; also prefixes IAM roles, file systems and the S3 bucket."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,37}[a-z0-9]$", var.cluster_name))
    error_message = "cluster_name must be 3-39 lowercase letters, digits or '-', starting with a letter."
  }
}

variable "kubernetes_version" {
  description = "Kubernetes version of the EKS control plane and the system node group."
  type        = string
  default     = "1.33"

  validation {
    condition     = can(regex("^1\\.(29|3[0-9])$", var.kubernetes_version))
    error_message = "kubernetes_version must be a supported EKS minor version, 1.29 or newer (e.g. \"1.33\")."
  }
}

variable "azs" {
  description = "Availability zones of the VPC (2 or 3, all in var.region). The first one hosts EFA, Neuron and FSx unless cuda_efa_az / neuron_az say otherwise."
  type        = list(string)

  validation {
    condition     = length(var.azs) >= 2 && length(var.azs) <= 3 && length(distinct(var.azs)) == length(var.azs)
    error_message = "azs must list 2 or 3 distinct availability zones."
  }

  validation {
    condition     = alltrue([for az in var.azs : startswith(az, var.region)])
    error_message = "Every availability zone in azs must belong to var.region."
  }
}

variable "cuda_efa_az" {
  description = "The single AZ for CUDA GPU nodes with EFA (and FSx for Lustre); empty means azs[0]. Must be the AZ of any capacity reservation or Capacity Block."
  type        = string
  default     = ""

  validation {
    condition     = var.cuda_efa_az == "" || contains(var.azs, var.cuda_efa_az)
    error_message = "cuda_efa_az must be empty or one of azs."
  }
}

variable "neuron_az" {
  description = "The single AZ for Neuron (Trainium / Inferentia) nodes; empty means azs[0]."
  type        = string
  default     = ""

  validation {
    condition     = var.neuron_az == "" || contains(var.azs, var.neuron_az)
    error_message = "neuron_az must be empty or one of azs."
  }
}

variable "vpc_cidr" {
  description = "IPv4 CIDR of the new VPC (a /16 or larger RFC 1918 range)."
  type        = string
  default     = "192.168.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 16
    error_message = "vpc_cidr must be a valid IPv4 CIDR with a prefix of /16 or shorter."
  }
}

variable "single_nat_gateway" {
  description = "Use one NAT gateway for the VPC (cheaper) instead of one per AZ (highly available)."
  type        = bool
  default     = true
}

variable "endpoint_public_access_cidrs" {
  description = "CIDRs allowed to reach the public EKS API endpoint. Narrow this to your own addresses."
  type        = list(string)
  default     = ["0.0.0.0/0"]

  validation {
    condition     = length(var.endpoint_public_access_cidrs) > 0 && alltrue([for c in var.endpoint_public_access_cidrs : can(cidrhost(c, 0))])
    error_message = "endpoint_public_access_cidrs must be a non-empty list of valid CIDRs."
  }
}

variable "tags" {
  description = "Tags added to every AWS resource."
  type        = map(string)
  default     = {}
}

################################################################################
# System node group (scaled by Cluster Autoscaler)
################################################################################

variable "system_instance_types" {
  description = "Instance types of the system managed node group (controllers, operators, CoreDNS)."
  type        = list(string)
  default     = ["m7a.xlarge", "m6a.xlarge", "m5.xlarge"]

  validation {
    condition     = length(var.system_instance_types) > 0
    error_message = "system_instance_types must not be empty."
  }
}

variable "system_capacity_type" {
  description = "Capacity type of the system node group: ON_DEMAND or SPOT."
  type        = string
  default     = "ON_DEMAND"

  validation {
    condition     = contains(["ON_DEMAND", "SPOT"], var.system_capacity_type)
    error_message = "system_capacity_type must be ON_DEMAND or SPOT."
  }
}

variable "system_node_min" {
  description = "Minimum size of the system node group."
  type        = number
  default     = 2

  validation {
    condition     = var.system_node_min >= 1
    error_message = "system_node_min must be at least 1 (Karpenter and the operators run there)."
  }
}

variable "system_node_max" {
  description = "Maximum size of the system node group (Cluster Autoscaler's upper bound)."
  type        = number
  default     = 8

  validation {
    condition     = var.system_node_max >= var.system_node_min
    error_message = "system_node_max must be >= system_node_min."
  }
}

variable "system_node_desired" {
  description = "Initial size of the system node group (Cluster Autoscaler changes it afterwards)."
  type        = number
  default     = 2

  validation {
    condition     = var.system_node_desired >= var.system_node_min && var.system_node_desired <= var.system_node_max
    error_message = "system_node_desired must be between system_node_min and system_node_max."
  }
}

variable "system_volume_size" {
  description = "Root volume size of system nodes, in GiB."
  type        = number
  default     = 100

  validation {
    condition     = var.system_volume_size >= 20 && var.system_volume_size <= 16384
    error_message = "system_volume_size must be between 20 and 16384 GiB."
  }
}

################################################################################
# Karpenter node pools
################################################################################

variable "karpenter_capacity_types" {
  description = "Capacity types the CUDA, CUDA+EFA and Neuron NodePools may use: on-demand and/or spot."
  type        = list(string)
  default     = ["on-demand"]

  validation {
    condition     = length(var.karpenter_capacity_types) > 0 && alltrue([for c in var.karpenter_capacity_types : contains(["on-demand", "spot"], c)])
    error_message = "karpenter_capacity_types must be a non-empty subset of [\"on-demand\", \"spot\"]."
  }
}

variable "karpenter_consolidate_after" {
  description = "How long an empty Karpenter node lives before it is removed (Go duration, e.g. 600s)."
  type        = string
  default     = "600s"

  validation {
    condition     = can(regex("^(([0-9]+(s|m|h))+|Never)$", var.karpenter_consolidate_after))
    error_message = "karpenter_consolidate_after must be a duration such as 600s, 30m, 1h or Never."
  }
}

variable "karpenter_max_pods" {
  description = "kubelet maxPods on Karpenter nodes; null keeps Karpenter's per-instance default."
  type        = number
  default     = null

  validation {
    condition     = var.karpenter_max_pods == null || try(var.karpenter_max_pods >= 1, false)
    error_message = "karpenter_max_pods must be null or a positive number."
  }
}

variable "cuda_instance_families" {
  description = "Instance families of the CUDA GPU NodePool (no EFA)."
  type        = list(string)
  default     = ["g5", "g6", "g6e", "p4d", "p4de", "p5", "p5e", "p5en"]
}

variable "cuda_efa_instance_types" {
  description = "EFA-capable GPU instance types of the CUDA+EFA NodePool (single AZ)."
  type        = list(string)
  default     = ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge"]

  validation {
    condition     = length(var.cuda_efa_instance_types) > 0
    error_message = "cuda_efa_instance_types must not be empty."
  }
}

variable "cuda_efa_capacity_reservation_ids" {
  description = "On-demand capacity reservation or Capacity Block ids (cr-...) for the CUDA+EFA NodePool. Non-empty means the pool launches only into these reservations."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for id in var.cuda_efa_capacity_reservation_ids : can(regex("^cr-[0-9a-z]+$", id))])
    error_message = "Each capacity reservation id must look like cr-0123456789abcdef0."
  }
}

variable "cuda_efa_capacity_block" {
  description = "True when cuda_efa_capacity_reservation_ids are Capacity Blocks for ML (time-bound) rather than on-demand capacity reservations."
  type        = bool
  default     = false

  validation {
    condition     = !var.cuda_efa_capacity_block || length(var.cuda_efa_capacity_reservation_ids) > 0
    error_message = "cuda_efa_capacity_block needs at least one id in cuda_efa_capacity_reservation_ids."
  }
}

variable "neuron_instance_types" {
  description = "Instance types of the Neuron NodePool (Trainium / Inferentia)."
  type        = list(string)
  default     = ["trn1.32xlarge", "trn1n.32xlarge", "trn2.48xlarge", "inf2.xlarge", "inf2.8xlarge", "inf2.24xlarge", "inf2.48xlarge"]
}

variable "cpu_capacity_types" {
  description = "Capacity types of the heavy-CPU NodePool: on-demand and/or spot."
  type        = list(string)
  default     = ["on-demand", "spot"]

  validation {
    condition     = length(var.cpu_capacity_types) > 0 && alltrue([for c in var.cpu_capacity_types : contains(["on-demand", "spot"], c)])
    error_message = "cpu_capacity_types must be a non-empty subset of [\"on-demand\", \"spot\"]."
  }
}

################################################################################
# Storage
################################################################################

variable "ml_namespace" {
  description = "Namespace of ML workloads; the pv-efs and pv-fsx claims are created there."
  type        = string
  default     = "kubeflow-user-example-com"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.ml_namespace))
    error_message = "ml_namespace must be a valid Kubernetes namespace name."
  }
}

variable "efs_performance_mode" {
  description = "EFS performance mode: generalPurpose or maxIO."
  type        = string
  default     = "generalPurpose"

  validation {
    condition     = contains(["generalPurpose", "maxIO"], var.efs_performance_mode)
    error_message = "efs_performance_mode must be generalPurpose or maxIO."
  }
}

variable "efs_throughput_mode" {
  description = "EFS throughput mode: bursting, elastic or provisioned."
  type        = string
  default     = "elastic"

  validation {
    condition     = contains(["bursting", "elastic", "provisioned"], var.efs_throughput_mode)
    error_message = "efs_throughput_mode must be bursting, elastic or provisioned."
  }
}

variable "fsx_deployment_type" {
  description = "FSx for Lustre deployment type: SCRATCH_2 (cheaper, no replication) or PERSISTENT_2."
  type        = string
  default     = "SCRATCH_2"

  validation {
    condition     = contains(["SCRATCH_2", "PERSISTENT_2"], var.fsx_deployment_type)
    error_message = "fsx_deployment_type must be SCRATCH_2 or PERSISTENT_2."
  }
}

variable "fsx_storage_capacity" {
  description = "FSx for Lustre capacity in GiB: 1200, or a multiple of 2400."
  type        = number
  default     = 1200

  validation {
    condition     = var.fsx_storage_capacity == 1200 || (var.fsx_storage_capacity >= 2400 && var.fsx_storage_capacity % 2400 == 0)
    error_message = "fsx_storage_capacity must be 1200 or a multiple of 2400."
  }
}

variable "fsx_per_unit_storage_throughput" {
  description = "MB/s per TiB for PERSISTENT_2 file systems (ignored for SCRATCH_2): 125, 250, 500 or 1000."
  type        = number
  default     = 250

  validation {
    condition     = contains([125, 250, 500, 1000], var.fsx_per_unit_storage_throughput)
    error_message = "fsx_per_unit_storage_throughput must be 125, 250, 500 or 1000."
  }
}

variable "fsx_data_repository_path" {
  description = "S3 path (s3://bucket[/prefix]) linked to /fsx with automatic import and export. Empty creates a new bucket."
  type        = string
  default     = ""

  validation {
    condition     = var.fsx_data_repository_path == "" || can(regex("^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", var.fsx_data_repository_path))
    error_message = "fsx_data_repository_path must be empty or an s3://bucket[/prefix] path."
  }
}

variable "s3_force_destroy" {
  description = "Let terraform destroy delete the created data bucket even when it still holds objects."
  type        = bool
  default     = false
}

################################################################################
# Operators and optional components (names follow the reference project)
################################################################################


variable "training_api" {
  description = "Kubeflow training API to install: v1 (training operator, PyTorchJob; infra/kustomize/training-operator) or v2 (Kubeflow Trainer v2.3.0, TrainJob, with JobSet; infra/kustomize/trainer-v2). mlrecipe's training_api: auto renders what the cluster serves."
  type        = string
  default     = "v1"

  validation {
    condition     = contains(["v1", "v2"], var.training_api)
    error_message = "training_api must be \"v1\" (training operator) or \"v2\" (Kubeflow Trainer v2)."
  }
}

variable "mpi_operator_version" {
  description = "MPI operator release (git tag) for MPIJob kubeflow.org/v2beta1."
  type        = string
  default     = "v0.6.0"

  validation {
    condition     = can(regex("^v[0-9]+\\.[0-9]+\\.[0-9]+$", var.mpi_operator_version))
    error_message = "mpi_operator_version must be a release tag such as v0.6.0."
  }
}

variable "kubeflow_manifests_version" {
  description = "kubeflow/manifests release (git tag) installed when kubeflow_platform_enabled."
  type        = string
  default     = "v1.10.1"

  validation {
    condition     = can(regex("^v[0-9]+\\.[0-9]+\\.[0-9]+$", var.kubeflow_manifests_version))
    error_message = "kubeflow_manifests_version must be a release tag such as v1.10.1."
  }
}

variable "chart_versions" {
  description = "Overrides of the pinned Helm chart versions in locals.tf (key: component, value: chart version)."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for v in values(var.chart_versions) : length(v) > 0])
    error_message = "chart_versions values must be non-empty version strings."
  }
}

variable "kubeflow_platform_enabled" {
  description = "Install the Kubeflow platform (dashboard, profiles, pipelines, notebooks) from kubeflow/manifests."
  type        = bool
  default     = false
}

variable "kserve_enabled" {
  description = "Install KServe (raw deployment mode) for model serving."
  type        = bool
  default     = false
}

variable "kueue_enabled" {
  description = "Install Kueue for job queueing and quotas."
  type        = bool
  default     = false
}

variable "airflow_enabled" {
  description = "Install Apache Airflow (KubernetesExecutor) for workflow orchestration."
  type        = bool
  default     = false
}

variable "dcgm_exporter_enabled" {
  description = "Install NVIDIA DCGM exporter for GPU metrics (scraped by Prometheus when enabled)."
  type        = bool
  default     = false
}

variable "ack_sagemaker_enabled" {
  description = "Install the ACK SageMaker controller (SageMaker resources as Kubernetes objects)."
  type        = bool
  default     = false
}

variable "slurm_enabled" {
  description = "Install Slurm on Kubernetes (SchedMD Slinky slurm-operator and a Slurm cluster)."
  type        = bool
  default     = false
}

variable "mlflow_enabled" {
  description = "Install an MLflow tracking server."
  type        = bool
  default     = false
}

variable "prometheus_enabled" {
  description = "Install kube-prometheus-stack (Prometheus, Grafana, node exporter)."
  type        = bool
  default     = true
}
