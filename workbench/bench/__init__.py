"""The benchmarks: ratios in one process (`ratios`), slowdown beside a second process (`load`),
examples per hour by executor (`executors`), absolute GPU times (`gpu`, run part by part by
`gpu_run` from `bench/gpu.sh`) and the wheels the GPU run carries (`gpu_env`)."""
