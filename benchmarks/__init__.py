"""glamrl's benchmarks: speed, memory and the longer learning runs, outside the tests.

Run them from the repository root as modules, `python -m benchmarks.NAME [args]` (the scripts import
each other as `benchmarks.*`), or `bash benchmarks/gpu.sh` for the GPU measurement.
"""
