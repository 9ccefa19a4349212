"""kdist: distributed PyTorch training on Kubernetes from one job.yaml.

The public API the CLI itself uses:

    job = kdist.load_job("job.yaml")    # validate; raises kdist.SpecError
    objects = kdist.render(job)         # pure: list of Kubernetes objects (dicts)
"""

from kdist.errors import ClusterError, JobFailed, KdistError, SpecError
from kdist.rendering import render
from kdist.spec import TrainingJob, load_job

__all__ = [
    "ClusterError",
    "JobFailed",
    "KdistError",
    "SpecError",
    "TrainingJob",
    "load_job",
    "render",
]
__version__ = "0.1.0"
