"""The job spec: read a job.yaml safely, validate it into one frozen model.

    job = load_job("job.yaml")   # TrainingJob, or SpecError with every problem

Layers (docs/DESIGN.md): this package imports only ``kdist.shared``.
"""

from kdist.spec.load import advice, load_job, parse_job, validate_job
from kdist.spec.model import TrainingJob

__all__ = ["TrainingJob", "advice", "load_job", "parse_job", "validate_job"]
