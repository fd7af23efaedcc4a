# Shared file systems: EFS (HOME, code, logs, checkpoints at /efs) and FSx for Lustre (data and
# pretrained models at /fsx) linked to S3 with automatic import and export.

resource "aws_security_group" "efs" {
  name_prefix = "${var.cluster_name}-efs-"
  description = "NFS from the cluster VPC to EFS mount targets"
  vpc_id      = module.vpc.vpc_id

  ingress {
    description = "NFS from the VPC"
    from_port   = 2049
    to_port     = 2049
    protocol    = "tcp"
    cidr_blocks = [var.vpc_cidr]
  }

  egress {
    description = "All outbound"
    from_port   = 0
    to_port     = 0
    protocol    = "-1"
    cidr_blocks = ["0.0.0.0/0"]
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_efs_file_system" "this" {
  creation_token   = "${var.cluster_name}-ml"
  encrypted        = true
  performance_mode = var.efs_performance_mode
  throughput_mode  = var.efs_throughput_mode

  tags = {
    Name = "${var.cluster_name}-ml"
  }
}

resource "aws_efs_mount_target" "this" {
  for_each = { for i, az in var.azs : az => i }

  file_system_id  = aws_efs_file_system.this.id
  subnet_id       = module.vpc.private_subnets[each.value]
  security_groups = [aws_security_group.efs.id]
}

resource "aws_security_group" "fsx" {
  name_prefix = "${var.cluster_name}-fsx-"
  description = "Lustre from the cluster VPC to FSx for Lustre"
  vpc_id      = module.vpc.vpc_id

  ingress {
    description = "Lustre from the VPC"
    from_port   = 988
    to_port     = 988
    protocol    = "tcp"
    cidr_blocks = [var.vpc_cidr]
  }

  ingress {
    description = "Lustre from the VPC"
    from_port   = 1018
    to_port     = 1023
    protocol    = "tcp"
    cidr_blocks = [var.vpc_cidr]
  }

  egress {
    description = "All outbound"
    from_port   = 0
    to_port     = 0
    protocol    = "-1"
    cidr_blocks = ["0.0.0.0/0"]
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_s3_bucket" "data" {
  count = var.fsx_data_repository_path == "" ? 1 : 0

  bucket_prefix = "${var.cluster_name}-ml-data-"
  force_destroy = var.s3_force_destroy
}

resource "aws_s3_bucket_public_access_block" "data" {
  count = var.fsx_data_repository_path == "" ? 1 : 0

  bucket                  = aws_s3_bucket.data[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

locals {
  fsx_data_repository_path = var.fsx_data_repository_path != "" ? var.fsx_data_repository_path : "s3://${aws_s3_bucket.data[0].bucket}"
}

resource "aws_fsx_lustre_file_system" "this" {
  storage_capacity            = var.fsx_storage_capacity
  deployment_type             = var.fsx_deployment_type
  per_unit_storage_throughput = var.fsx_deployment_type == "PERSISTENT_2" ? var.fsx_per_unit_storage_throughput : null
  file_system_type_version    = "2.15"
  data_compression_type       = "LZ4"
  subnet_ids                  = [local.fsx_subnet_id]
  security_group_ids          = [aws_security_group.fsx.id]

  log_configuration {
    level = "WARN_ERROR"
  }

  tags = {
    Name = "${var.cluster_name}-ml"
  }
}

resource "aws_fsx_data_repository_association" "this" {
  file_system_id                   = aws_fsx_lustre_file_system.this.id
  data_repository_path             = local.fsx_data_repository_path
  file_system_path                 = "/"
  batch_import_meta_data_on_create = true
  delete_data_in_filesystem        = false

  s3 {
    auto_import_policy {
      events = ["NEW", "CHANGED", "DELETED"]
    }

    auto_export_policy {
      events = ["NEW", "CHANGED", "DELETED"]
    }
  }
}
