"""What the artifact store refuses, or cannot find."""

from __future__ import annotations

from cairn.errors import CairnError


class ArtifactError(CairnError):
    """An artifact could not be written, registered or read. Retrying does not help: a
    handler that raises it fails permanently (see :mod:`cairn.model.classify`)."""

    code = "artifact_error"
    error_class = "permanent"


class ArtifactNotFound(ArtifactError):
    """No artifact of that name (or version) in the run, or its content is gone."""

    code = "artifact_not_found"


class ArtifactCorrupt(ArtifactError):
    """The object store returned bytes whose sha256 is not the one registered."""

    code = "artifact_corrupt"
