"""One layer's operators as the profiler runs them: the GEMMs vLLM runs, and fused elementwise kernels.

vLLM's unquantized linear layers call ``torch.nn.functional.linear`` (cuBLAS), so the GEMMs here are the
same calls on the same shapes. Its norms, activation and rotary embedding are its own fused CUDA kernels
(``rms_norm``, ``silu_and_mul``, ``rotary_embedding``), which are not importable without vLLM; the
profiler runs Triton kernels that do the same work in one pass each (one read and one write of every
element, fp32 arithmetic), so their times are those of a fused memory-bound kernel, as vLLM's are. Where
Triton cannot run (no GPU and no interpreter wanted), the torch expressions of :func:`reference` stand in
and the profile says so (``impl`` in its metadata).

Only basic ``tl`` operations are used (the GPU image has triton 3.6). ``rope`` is NeoX-style (Llama,
Qwen) and rotates, in place, the first ``heads + kv_heads`` heads of each row of the fused QKV output, as
vLLM's rotary embedding does on its q and k views.
"""

from __future__ import annotations

import torch

try:  # triton ships with torch on GPU hosts and with vLLM here
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = None


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


if triton is not None:
    @triton.jit
    def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < n_cols
        x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        tl.store(out_ptr + row * n_cols + offs, (x * inv * w).to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _silu_mul_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_cols
        gate = tl.load(x_ptr + row * 2 * n_cols + offs, mask=mask, other=0.0).to(tl.float32)
        up = tl.load(x_ptr + row * 2 * n_cols + n_cols + offs, mask=mask, other=0.0).to(tl.float32)
        out = gate / (1.0 + tl.exp(-gate)) * up
        tl.store(out_ptr + row * n_cols + offs, out.to(out_ptr.dtype.element_ty), mask=mask)

    @triton.jit
    def _rope_kernel(qkv_ptr, pos_ptr, cos_ptr, sin_ptr, row_stride, HALF: tl.constexpr):
        tok = tl.program_id(0)
        head = tl.program_id(1)
        offs = tl.arange(0, HALF)
        pos = tl.load(pos_ptr + tok)
        cos = tl.load(cos_ptr + pos * HALF + offs)
        sin = tl.load(sin_ptr + pos * HALF + offs)
        base = qkv_ptr + tok * row_stride + head * 2 * HALF
        x1 = tl.load(base + offs).to(tl.float32)
        x2 = tl.load(base + HALF + offs).to(tl.float32)
        tl.store(base + offs, (x1 * cos - x2 * sin).to(qkv_ptr.dtype.element_ty))
        tl.store(base + HALF + offs, (x2 * cos + x1 * sin).to(qkv_ptr.dtype.element_ty))

    @triton.jit
    def _add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, (a + b).to(out_ptr.dtype.element_ty), mask=mask)


class TritonOps:
    """The fused elementwise operators as Triton launches (compiled on CUDA, interpreted elsewhere)."""

    name = "triton"

    def rmsnorm(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, eps: float = 1e-6) -> None:
        rows, cols = x.shape
        _rmsnorm_kernel[(rows,)](x, w, out, cols, eps, BLOCK=_next_pow2(cols))

    def silu_and_mul(self, x: torch.Tensor, out: torch.Tensor) -> None:
        rows, cols = out.shape
        block = min(1024, _next_pow2(cols))
        _silu_mul_kernel[(rows, -(-cols // block))](x, out, cols, BLOCK=block)

    def rope(self, qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             rotated_heads: int, head_dim: int) -> None:
        rows = qkv.shape[0]
        _rope_kernel[(rows, rotated_heads)](qkv, positions, cos, sin, qkv.stride(0), HALF=head_dim // 2)

    def add(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        n = a.numel()
        _add_kernel[(-(-n // 1024),)](a, b, out, n, BLOCK=1024)


class TorchOps:
    """The same operators as plain torch expressions (several kernels each): the stand-in and the
    reference the Triton kernels are tested against."""

    name = "torch"

    def rmsnorm(self, x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, eps: float = 1e-6) -> None:
        xf = x.float()
        out.copy_(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float())

    def silu_and_mul(self, x: torch.Tensor, out: torch.Tensor) -> None:
        n = out.shape[1]
        xf = x.float()
        out.copy_(torch.nn.functional.silu(xf[:, :n]) * xf[:, n:])

    def rope(self, qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             rotated_heads: int, head_dim: int) -> None:
        half = head_dim // 2
        view = qkv[:, : rotated_heads * head_dim].view(qkv.shape[0], rotated_heads, head_dim)
        c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
        x1, x2 = view[..., :half].float(), view[..., half:].float()
        r1, r2 = x1 * c - x2 * s, x2 * c + x1 * s
        view[..., :half] = r1.to(qkv.dtype)
        view[..., half:] = r2.to(qkv.dtype)

    def add(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        torch.add(a, b, out=out)


def reference() -> TorchOps:
    return TorchOps()


def elementwise_ops(device: str, prefer_triton: bool = True) -> TritonOps | TorchOps:
    """Triton on CUDA when it is importable, else torch (the profile records which)."""
    if prefer_triton and triton is not None and device.startswith("cuda"):
        return TritonOps()
    return TorchOps()


def rope_cache(max_pos: int, head_dim: int, device: str, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 cos and sin tables ``[max_pos, head_dim // 2]`` (NeoX layout)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32, device=device), inv)
    return freqs.cos().contiguous(), freqs.sin().contiguous()
