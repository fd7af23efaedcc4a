"""Code shared by the ray_train scripts (``common``: CLI, paths, loading; ``callbacks``: Trainer callbacks;
``ray_launch``: the Ray driver side of the trainers)."""
