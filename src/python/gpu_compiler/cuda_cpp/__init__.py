"""The CUDA C++ front end: NVRTC, with `#include`s resolved inside the compile's inputs."""
