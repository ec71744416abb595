"""Post-communication reorder fused with the element-wise epilogue.

``post_reorder.cuh`` (in ``fo_lib/cuda``) gathers the communication buffer back into row-major
order through an int64 table and applies, in this order (fp32, each 16-bit result rounded once)::

      v = buf[src_offset[r, j // BN] + j % BN]
      v += bias[j]                      (PostOps.bias)
      v = activation(v)                 (PostOps.activation)
      v += residual[r, j]               (PostOps.residual)
      residual_out[r, j] = v            (PostOps.residual_out; may alias residual)
      out[r, j] = v * rsqrt(mean_j(v^2) + eps) * weight[j]   if PostOps.rmsnorm else v

The same kernel restores the ReduceScatter -> AllGather layout: only the table differs. With
``sources = W > 1`` it also finishes an AllReduce whose collective was an AllGather: every table
entry then has ``W`` copies in the buffer, copy ``s`` at ``src_offset + s * peer_stride`` (a second
table of the same shape), and ``v`` is their fp32 sum.

Modules: :mod:`~fo_lib.postops.spec` (:class:`PostOps` and the kernel's limits),
:mod:`~fo_lib.postops.reference` (:func:`post_reorder_reference`: the same math in float64 with
NumPy, for the tests and the CPU engine), :mod:`~fo_lib.postops.kernel` (the NVRTC source and the
launch geometry) and :mod:`~fo_lib.postops.launch` (:func:`post_reorder`,
:func:`post_reorder_launcher`: torch CUDA tensors, launched on a torch stream). Their public names
are this package's. torch and CuPy are imported lazily: ``import fo_lib.postops`` needs neither.
"""
from __future__ import annotations

from .kernel import (SUMMED_CHECKS, LaunchConfig, compile_check_ops, compile_check_sources, generate_source,
                     kernel_items, launch_config)
from .launch import PostReorderLaunch, check_table_bounds, post_reorder, post_reorder_launcher
from .reference import activation_reference, gather_reference, post_reorder_reference
from .spec import (ACTIVATIONS, CHUNK, DTYPES, MAX_N, MAX_NORM_N, MAX_SOURCES, MAX_THREADS_PER_ROW, NORM_ITEMS,
                   PostOps)

__all__ = ["ACTIVATIONS", "CHUNK", "DTYPES", "MAX_N", "MAX_NORM_N", "MAX_SOURCES", "MAX_THREADS_PER_ROW",
           "NORM_ITEMS", "SUMMED_CHECKS", "LaunchConfig", "PostOps", "PostReorderLaunch", "activation_reference",
           "check_table_bounds", "compile_check_ops", "compile_check_sources", "gather_reference",
           "generate_source", "kernel_items", "launch_config", "post_reorder", "post_reorder_launcher",
           "post_reorder_reference"]
