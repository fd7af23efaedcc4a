# In-cluster objects from this repository's chart (infra/charts/ml-platform): Karpenter NodePools and
# EC2NodeClasses, storage classes, pv-efs / pv-fsx and their claims, the ML namespace. The chart's
# rendered output is validated against the Karpenter CRDs and Kubernetes schemas in tests/infra.

resource "helm_release" "ml_platform" {
  name      = "ml-platform"
  namespace = "kube-system"
  chart     = "${path.module}/../charts/ml-platform"

  values = [yamlencode({
    clusterName = module.eks.cluster_name
    mlNamespace = {
      name = var.ml_namespace
      # Kubeflow's profile controller owns the user namespace when the platform is installed.
      create = !var.kubeflow_platform_enabled
    }
    karpenter = {
      enabled          = true
      nodeRole         = module.karpenter.node_iam_role_name
      consolidateAfter = var.karpenter_consolidate_after
      maxPods          = var.karpenter_max_pods
      nodePools = {
        cuda = {
          instanceFamilies = var.cuda_instance_families
          capacityTypes    = var.karpenter_capacity_types
        }
        cudaEfa = {
          instanceTypes = var.cuda_efa_instance_types
          capacityTypes = var.karpenter_capacity_types
          capacityReservation = {
            ids           = var.cuda_efa_capacity_reservation_ids
            capacityBlock = var.cuda_efa_capacity_block
          }
        }
        neuron = {
          instanceTypes = var.neuron_instance_types
          capacityTypes = var.karpenter_capacity_types
        }
        cpu = {
          capacityTypes = var.cpu_capacity_types
        }
      }
    }
    storage = {
      efs = {
        fileSystemId = aws_efs_file_system.this.id
      }
      fsx = {
        fileSystemId = aws_fsx_lustre_file_system.this.id
        dnsName      = aws_fsx_lustre_file_system.this.dns_name
        mountName    = aws_fsx_lustre_file_system.this.mount_name
        capacity     = "${var.fsx_storage_capacity}Gi"
      }
    }
  })]

  depends_on = [
    helm_release.karpenter,
    helm_release.fsx_csi,
    aws_efs_mount_target.this,
    aws_fsx_data_repository_association.this,
  ]
}
