"""The output promise and its receipt (seed 000: "a slot is complete only after the
promised output is confirmed").

A definition promises a non-empty markdown report (default) or an artifact file of
a declared type under a declared directory. The check runs before the report commit;
a run that returns without meeting the promise ends ``failed_verification``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from watchkeeper.triggers import OutputPromise

from ._agents import AgentResult

__all__ = ["Verification", "verify_output"]


@dataclass(frozen=True, slots=True)
class Verification:
    """The receipt's verification part.

    Attributes:
        ok: the promise is met.
        detail: one sentence: what was checked, or what is missing.
        output_ref: the artifact's path when the promise is an artifact.
        content_sha256: hash of the artifact's bytes (or of the report), hex.
    """

    ok: bool
    detail: str
    output_ref: str | None = None
    content_sha256: str | None = None


def verify_output(promise: OutputPromise, result: AgentResult, artifact_dir: Path | None) -> Verification:
    """Check ``result`` against ``promise`` (reads the artifact file; no other I/O)."""
    if promise.kind == "markdown":
        if not result.report.strip():
            return Verification(False, "the promised markdown report is empty")
        digest = hashlib.sha256(result.report.encode()).hexdigest()
        return Verification(True, f"non-empty markdown report ({len(result.report.encode())} bytes)",
                            None, digest)
    return _verify_artifact(promise, result, artifact_dir)


def _verify_artifact(promise: OutputPromise, result: AgentResult,
                     artifact_dir: Path | None) -> Verification:
    if result.artifact is None or artifact_dir is None:
        return Verification(False, "the run returned no artifact path")
    path = Path(result.artifact)
    path = (artifact_dir / path if not path.is_absolute() else path).resolve()
    root = artifact_dir.resolve()
    if not path.is_relative_to(root):
        return Verification(False, f"the artifact {path} is outside the declared directory {root}")
    if not path.is_file():
        return Verification(False, f"the artifact {path} does not exist")
    data = path.read_bytes()
    if not data:
        return Verification(False, f"the artifact {path} is empty")
    if promise.type and path.suffix != promise.type:
        return Verification(False, f"the artifact {path.name} is not of type {promise.type}")
    return Verification(True, f"artifact {path.name} exists, {len(data)} bytes, type {path.suffix}",
                        str(path), hashlib.sha256(data).hexdigest())
