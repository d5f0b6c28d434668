"""The CUDA driver through cuda.bindings: contexts, modules, launches, streams, graphs and
device arrays. The only part of the runtime that talks to the GPU."""
