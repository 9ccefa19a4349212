"""spec.checkpoint: where a job keeps its checkpoints, and the volume they live on."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from kdist.spec import checks as C
from kdist.spec.pod import ClaimSource, ScratchSource
from kdist.spec.pod import PodModel as _Model


class CheckpointVolume(_Model):
    """Where checkpoints live: one of persistentVolumeClaim or emptyDir."""

    persistent_volume_claim: ClaimSource | None = Field(
        default=None, description="A claim every pod mounts: checkpoints outlive pods, so a "
        "restarted job resumes.")
    empty_dir: ScratchSource | None = Field(
        default=None, description="Scratch space, new with each pod: a restart starts from step 0.")

    @model_validator(mode="after")
    def _one(self) -> CheckpointVolume:
        if (self.persistent_volume_claim is None) == (self.empty_dir is None):
            raise ValueError("give exactly one of persistentVolumeClaim or emptyDir")
        return self


class Checkpoint(_Model):
    """Where the job keeps checkpoints (KDIST_CHECKPOINT_DIR); a local run uses
    .kdist/NAME/checkpoints beside the job file instead."""

    path: str = Field(description="Where the volume is mounted in the pod; exported as "
                      "KDIST_CHECKPOINT_DIR.")
    volume: CheckpointVolume = Field(description="The volume mounted there.")

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return C.mount_path(v)
