"""GPU tier options and fixtures (benchmarks, memory); see tests/test_gpu_benchmarks.py."""
