# htam-candidate: a hand-written direct 2-D convolution in Triton (one program: a block of output pixels of one
# (image, output channel); loops over input channels and the kernel window), the kind of kernel a model writes
# when told to avoid cuDNN. Under the CPU interpreter it pays per program and per window tap: about 3 s a program
# at level1/50's smoke shape, 192 programs a call, so benchmarks/smoke_eval_cost.py leaves it out of its default
# list and times triton_conv2d_implicit_gemm.py (the same convolution in implicit-GEMM form) instead.
# task: level1/50_conv_standard_2D__square_input__square_kernel.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv2d_kernel(x_ptr, w_ptr, b_ptr, out_ptr, C_in, H, W, C_out, H_out, W_out,
                  KS: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    pid_nc = tl.program_id(0)
    pid_p = tl.program_id(1)
    n = pid_nc // C_out
    oc = pid_nc % C_out
    pix = pid_p * BLOCK + tl.arange(0, BLOCK)
    valid = pix < H_out * W_out
    oh = pix // W_out
    ow = pix % W_out
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for ic in range(0, C_in):
        for kh in range(0, KS):
            for kw in range(0, KS):
                ih = oh * STRIDE - PAD + kh
                iw = ow * STRIDE - PAD + kw
                inside = valid & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                x = tl.load(x_ptr + ((n * C_in + ic) * H + ih) * W + iw, mask=inside, other=0.0)
                w = tl.load(w_ptr + ((oc * C_in + ic) * KS + kh) * KS + kw)
                acc += x * w
    acc += tl.load(b_ptr + oc)
    tl.store(out_ptr + (n * C_out + oc) * H_out * W_out + pix, acc, mask=valid)


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
        block = 128
        grid = (n * c_out, triton.cdiv(h_out * w_out, block))
        conv2d_kernel[grid](x, w, self.conv1.bias, out, c_in, h, w_in, c_out, h_out, w_out,
                            KS=ks, STRIDE=stride, PAD=pad, BLOCK=block)  # fmt: skip
        return out
