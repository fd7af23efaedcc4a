"""The Kubernetes backend: each step is one Helm release of its catalog chart."""
