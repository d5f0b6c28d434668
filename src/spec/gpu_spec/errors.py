"""The errors of the shared rules: a value a user or a file gave breaks one of them."""

from __future__ import annotations


class SpecError(ValueError):
    """A capability, version or option is not one the rules accept; the message says which are."""


class ManifestError(SpecError):
    """A `manifest.json`, or the compile metadata a manifest is built from, is malformed."""
