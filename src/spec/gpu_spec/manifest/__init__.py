"""The bundle manifest (cache/manifest.json): its model, its parser and checks, and how a
build writes it from compile metadata."""
