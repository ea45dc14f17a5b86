# htam-candidate: a hand-written direct 2-D convolution in Triton in implicit-GEMM form (one program: a tile of
# output pixels x a tile of output channels of one image; the C_in*KH*KW reduction runs in blocks of taps gathered
# from the input with masked loads and multiplied by the weight tile with tl.dot; bias in the epilogue), the form
# GPU convolution kernels take. Under the CPU interpreter its cost follows the number of programs x reduction
# blocks, not the number of taps.
# task: level1/50_conv_standard_2D__square_input__square_kernel.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv2d_igemm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, C_in, H, W, C_out, H_out, W_out,
                        KS: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr,
                        BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    n = tl.program_id(0)
    pid_p = tl.program_id(1)
    pid_c = tl.program_id(2)
    pix = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)  # output pixels of image n: rows of the GEMM
    oc = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)  # output channels: columns of the GEMM
    pix_ok = pix < H_out * W_out
    oc_ok = oc < C_out
    ih0 = (pix // W_out) * STRIDE - PAD
    iw0 = (pix % W_out) * STRIDE - PAD
    K = C_in * KS * KS  # reduction over (input channel, kernel row, kernel column), the weight's memory order
    x_img = x_ptr + n * C_in * H * W
    acc = tl.zeros([BLOCK_P, BLOCK_C], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_ok = k < K
        ic = k // (KS * KS)
        kh = (k // KS) % KS
        kw = k % KS
        ih = ih0[:, None] + kh[None, :]
        iw = iw0[:, None] + kw[None, :]
        inside = pix_ok[:, None] & k_ok[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(x_img + (ic[None, :] * H + ih) * W + iw, mask=inside, other=0.0)  # [BLOCK_P, BLOCK_K]
        b = tl.load(w_ptr + oc[None, :] * K + k[:, None], mask=k_ok[:, None] & oc_ok[None, :], other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")  # fp32 in, fp32 accumulate (no TF32)
    acc += tl.load(b_ptr + oc, mask=oc_ok, other=0.0)[None, :]
    out = out_ptr + (n * C_out + oc[None, :]) * (H_out * W_out) + pix[:, None]
    tl.store(out, acc, mask=pix_ok[:, None] & oc_ok[None, :])


class ModelNew(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels=3, out_channels=96, kernel_size=11, stride=4, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.conv1.weight.contiguous()
        n, c_in, h, w_in = x.shape
        c_out, ks = w.shape[0], w.shape[2]
        stride, pad = self.conv1.stride[0], self.conv1.padding[0]
        h_out = (h + 2 * pad - ks) // stride + 1
        w_out = (w_in + 2 * pad - ks) // stride + 1
        out = torch.empty((n, c_out, h_out, w_out), device=x.device, dtype=x.dtype)
        block_p, block_c, block_k = 64, 32, 64
        grid = (n, triton.cdiv(h_out * w_out, block_p), triton.cdiv(c_out, block_c))
        conv2d_igemm_kernel[grid](x, w, self.conv1.bias, out, c_in, h, w_in, c_out, h_out, w_out,
                                  KS=ks, STRIDE=stride, PAD=pad,
                                  BLOCK_P=block_p, BLOCK_C=block_c, BLOCK_K=block_k)  # fmt: skip
        return out
