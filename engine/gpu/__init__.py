"""The GPU half of the engine: a worker process that loads, launches, verifies and times.

Only the worker process (``python -m ptxbench.engine.gpu.worker``) imports
CUDA libraries (torch, cupy, cuda.bindings). The modules `protocol` and
`classify` are plain Python so the parent side (engine/runner.py) and the
tests can use them on a machine with no GPU stack at all.
"""
