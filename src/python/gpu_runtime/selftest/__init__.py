"""`app.pex --self-test`: every kernel of a bundle launched on the GPU against an app's
reference table."""
