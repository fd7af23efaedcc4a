output "cluster_name" {
  description = "Name of the EKS cluster."
  value       = module.eks.cluster_name
}

output "cluster_endpoint" {
  description = "Endpoint of the EKS API server."
  value       = module.eks.cluster_endpoint
}

output "cluster_arn" {
  description = "ARN of the EKS cluster (the kubeconfig context name the AWS CLI writes)."
  value       = module.eks.cluster_arn
}

output "region" {
  description = "AWS region of the cluster."
  value       = var.region
}

output "configure_kubectl" {
  description = "Command that writes the kubeconfig entry for this cluster."
  value       = "aws eks update-kubeconfig --region ${var.region} --name ${module.eks.cluster_name}"
}

output "doctor_command" {
  description = "Preflight check of this cluster for mlrecipe."
  value       = "mlrecipe doctor --backend kubernetes --context ${module.eks.cluster_arn} --namespace ${var.ml_namespace}"
}

output "ml_namespace" {
  description = "Namespace of ML workloads, holding the pv-efs and pv-fsx claims."
  value       = var.ml_namespace
}

output "vpc_id" {
  description = "ID of the cluster VPC."
  value       = module.vpc.vpc_id
}

output "private_subnet_ids" {
  description = "Private subnet IDs, one per AZ in var.azs order."
  value       = module.vpc.private_subnets
}

output "efs_file_system_id" {
  description = "EFS file system ID behind pv-efs (/efs)."
  value       = aws_efs_file_system.this.id
}

output "fsx_file_system_id" {
  description = "FSx for Lustre file system ID behind pv-fsx (/fsx)."
  value       = aws_fsx_lustre_file_system.this.id
}

output "fsx_dns_name" {
  description = "DNS name of the FSx for Lustre file system."
  value       = aws_fsx_lustre_file_system.this.dns_name
}

output "fsx_mount_name" {
  description = "Lustre mount name of the FSx file system."
  value       = aws_fsx_lustre_file_system.this.mount_name
}

output "fsx_data_repository_path" {
  description = "S3 path linked to /fsx (automatic import and export)."
  value       = local.fsx_data_repository_path
}

output "karpenter_node_role_name" {
  description = "IAM role of nodes launched by Karpenter."
  value       = module.karpenter.node_iam_role_name
}
