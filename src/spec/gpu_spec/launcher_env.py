"""The environment variables between a bundle's launcher, gpu_runtime and the deploy tool,
named once.

The launcher (gpu_build/util_rules/bundle_launcher.py) reads `INIT_CUDA_ENV` ("0" or "1": whether
it starts CUDA before the app) and, when it does, sets `INIT_CUDA_PID_ENV` to the pid of the
process it started CUDA in, so that gpu_runtime (gpu_runtime/driver/device.py) can explain the
error of a child forked from it. With `PREPARE_ONLY_ENV=1` the launcher makes (or finds) the
app's venv and exits without running the app: the deploy tool does that on the device before it
switches to a release (scripts/remote_release.py), so that the release's first run starts warm.
"""

INIT_CUDA_ENV = "GPU_BUNDLE_INIT_CUDA"
INIT_CUDA_PID_ENV = "GPU_BUNDLE_CUDA_INIT_PID"
PREPARE_ONLY_ENV = "GPU_BUNDLE_PREPARE_ONLY"
# Exit status of a launcher whose app.pex is not the one it was built with (app.py's "gpu_runtime
# could not run" status: the bundle is damaged, nothing ran). The deploy tool does not switch to
# a release whose launcher exits so when it prepares it.
TAMPERED_EXIT = 2
# The name of the launcher's CUDA start thread: gpu_runtime lets it finish before a fork.
INIT_CUDA_THREAD = "gpu_bundle: CUDA init"
