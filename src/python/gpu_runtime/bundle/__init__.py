"""A device bundle's cache/: finding it, its manifest and trust, integrity, completeness, and
choosing and loading the variant for the GPU at hand."""
