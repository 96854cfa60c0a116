import torch

from dlbench.measure.flops import achieved_tflops, count_flops


def test_linear_flops_match_hand_count():
    layer = torch.nn.Linear(128, 32)
    x = torch.randn(16, 128)
    assert count_flops(lambda: layer(x)) == 2 * 16 * 128 * 32


def test_conv_forward_and_backward_flops_match_hand_count():
    conv = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1, bias=False)
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    forward = 2 * 2 * 8 * 16 * 16 * 3 * 3 * 3  # 2 * N * Cout * H * W * Cin * k * k
    assert count_flops(lambda: conv(x)) == forward
    # backward: gradient of the input and of the weight, each as costly as the forward
    assert count_flops(lambda: conv(x).sum().backward()) == 3 * forward


def test_batched_matmul_flops():
    a, b = torch.randn(4, 16, 32), torch.randn(4, 32, 8)
    assert count_flops(lambda: a @ b) == 2 * 4 * 16 * 32 * 8


def test_achieved_tflops():
    assert achieved_tflops(1e12, [0.5, 0.5]) == 2.0
    assert achieved_tflops(0, [1.0]) is None and achieved_tflops(1e12, []) is None
