"""Kernel time on CUDA: what the GPU spends in the kernels of one call (`int8nax compare --mode
kernel`, the asv suite's KernelTime) and where that time goes.

    mode     the mode's items, report and options (python -m int8nax.bench.kernel.mode --worker)
    plans    W8A8 on every plan the CUDA dispatch could give a shape (--plans)
    cases    each item's operands, timed launches and check on the device
    worker   the worker process that survives a faulting kernel
    cupti    CUPTI activity records (through torch.profiler) to per-launch kernel times
    ncu      Nsight Compute profiles of kernel-mode items (python -m int8nax.bench.kernel.ncu)
"""
