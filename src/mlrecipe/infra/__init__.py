"""Cluster infrastructure helpers: eksctl ClusterConfig generation and the ``doctor`` preflight."""
