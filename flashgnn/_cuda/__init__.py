"""Run-time CUDA: NVRTC compilation of kernels/*.cu, an on-disk cubin cache, and launches
on the current torch stream. Nothing here runs at install time."""
