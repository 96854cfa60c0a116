"""On a GPU: `volume --kernels fused` gives the same output to the bit as PyTorch's kernels, for
3D U-Nets with ReLU, in fp16, bf16 and fp32, in both layouts.

  python benchmarks/fused_check.py
"""

from __future__ import annotations

import torch

from dlbench.models import fused, registry


def main() -> None:
    torch.manual_seed(0)
    print("| model | precision | layout | fused layers | outputs equal to the bit |")
    print("|---|---|---|---:|---|")
    for name in ("unet3d", "unet3d:f=16,d=3"):
        model = registry.build(name).cuda().eval()
        faster, count = fused.fuse(model)
        for layout in (torch.channels_last_3d, torch.contiguous_format):
            model.to(memory_format=layout)
            x = torch.rand(1, 1, 40, 96, 80, device="cuda").contiguous(memory_format=layout)
            for precision, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", None)):
                with torch.no_grad(), torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                    same = torch.equal(model(x), faster(x))
                print(f"| {name} | {precision} | {'cl3d' if layout is torch.channels_last_3d else 'ncdhw'} | {count} | "
                      f"{same} |")


if __name__ == "__main__":
    main()
