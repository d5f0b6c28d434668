"""The environment variables between a bundle's launcher and gpu_runtime, named once.

The launcher (gpu_build/util_rules/bundle_launcher.py) reads `INIT_CUDA_ENV` ("0" or "1": whether
it starts
CUDA before the app) and, when it does, sets `INIT_CUDA_PID_ENV` to the pid of the process it
started CUDA in, so that gpu_runtime (gpu_runtime/driver/device.py) can explain the error of a child
forked from it.
"""

INIT_CUDA_ENV = "GPU_BUNDLE_INIT_CUDA"
INIT_CUDA_PID_ENV = "GPU_BUNDLE_CUDA_INIT_PID"
