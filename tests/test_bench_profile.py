"""tools/bench_profile.py (bench_scale.py --profile): CUDA kernel names of the kinds an H100 run
shows, classed by hand; a profile with no GEMM time reports zeros and no rate instead of dividing
by zero; and the CPU path end to end on one tiny step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import bench_profile as bp  # noqa: E402

KERNELS = {
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas": "gemm",
    "nvjet_tst_192x192_64x3_2x1_v_bz_coopA_TNT": "gemm",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(Params)": "gemm",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0": "attention",
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>": "attention",
    "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 12, false, false>": "attention",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>": "optimizer",
    "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, float, long>>": "optimizer",
    "Memcpy DtoD (Device -> Device)": "copy",
    "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2>, unsigned int, 3, 64, 64>": "copy",
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda(c10::BFloat16)#1}>>": "copy",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>>": "elementwise",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>>": "elementwise",
    "void transformer_engine::detail::cast_transpose_fused_kernel_notaligned<true, float, __nv_bfloat16, __nv_fp8_e4m3>": "elementwise",
    "void transformer_engine::rmsnorm::rmsnorm_fwd_tuned_kernel<...>": "elementwise",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL": "other",
}


@pytest.mark.parametrize(("name", "cls"), list(KERNELS.items()))
def test_kernel_names_are_classed(name: str, cls: str) -> None:
    assert bp.kernel_class(name) == cls


def test_cpu_ops_are_classed() -> None:
    assert [bp.op_class(n) for n in ("aten::mm", "aten::_scaled_dot_product_flash_attention_for_cpu",
                                     "aten::_foreach_mul_", "aten::cat", "aten::silu", "MmBackward0")] == \
        ["gemm", "attention", "optimizer", "copy", "elementwise", "other"]


def test_no_gemm_time_is_zero_and_no_rate_not_a_division_by_zero() -> None:
    """A TE scope on CUDA used to report gemm_s = 0 and crash dividing by it before its JSON."""
    s = bp.summarize([("ncclKernel", "other", 0.0)], [], steps=2, activity="cuda")
    assert s["classes"]["gemm"] == 0.0 and s["total_s"] == 0.0 and s["shares"]["gemm"] == 0.0
    assert bp.rate(1e12, s["classes"]["gemm"]) is None and bp.rate(2e12, 0.5) == 4e12
    s = bp.summarize([("a", "gemm", 3e6), ("b", "copy", 1e6)], [("aten::mm", "[[4, 4], [4, 4]]", 3e6, 4)], 2, "cuda")
    assert s["classes"]["gemm"] == 1.5 and s["shares"]["gemm"] == 0.75 and s["gemm_by_shape"][0]["calls"] == 2


def test_the_cpu_path_end_to_end(tmp_path: Path) -> None:
    import torch

    w = torch.randn(32, 32, requires_grad=True)
    opt = torch.optim.AdamW([w], foreach=True)

    def step() -> None:
        opt.zero_grad()
        torch.cat([w @ w, w]).relu().sum().backward()
        opt.step()

    out = bp.profile_steps(step, steps=2, cuda=False, trace=str(tmp_path / "t.json"))
    assert out["activity"] == "cpu" and out["classes"]["gemm"] > 0 and out["classes"]["optimizer"] > 0
    assert out["classes"]["copy"] > 0 and out["gemm_by_shape"][0]["shapes"] == "[[32, 32], [32, 32]]"
    assert Path(out["trace"]).stat().st_size > 100 and not (tmp_path / "t.json").exists()


def test_gpu_user_annotations_are_not_counted_twice() -> None:
    """On CUDA, a record_function range (the optimizer's `Optimizer.step#AdamW.step`) is a row of its
    own on the GPU timeline, spanning its kernels: the H200 profile of 2026-11-28 counted it beside
    them, doubling the optimizer class. Only kernels count; on CPU, operators' self time."""
    from types import SimpleNamespace as E

    from torch.autograd import DeviceType

    events = [
        E(key="Optimizer.step#AdamW.step", device_type=DeviceType.CUDA, is_user_annotation=True,
          self_device_time_total=20.0, self_cpu_time_total=0.0),
        E(key="multi_tensor_apply_kernel<Adam>", device_type=DeviceType.CUDA, is_user_annotation=False,
          self_device_time_total=19.0, self_cpu_time_total=0.0),
        E(key="nvjet_sm90_tst_256x128", device_type=DeviceType.CUDA, is_user_annotation=False,
          self_device_time_total=30.0, self_cpu_time_total=0.0),
        E(key="aten::mm", device_type=DeviceType.CPU, is_user_annotation=False,
          self_device_time_total=0.0, self_cpu_time_total=5.0),
    ]
    assert bp.time_rows(events, True, DeviceType) == [("multi_tensor_apply_kernel<Adam>", "optimizer", 19.0),
                                                      ("nvjet_sm90_tst_256x128", "gemm", 30.0)]
    assert bp.time_rows(events, False, DeviceType) == [("aten::mm", "gemm", 5.0)]
