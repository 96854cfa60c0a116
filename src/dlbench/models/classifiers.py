"""The image classifiers of the seeds (004's cnn-benchmarks, 002's ResNet-50), from torchvision."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlbench.models.registry import ModelEntry, register, torchvision

if TYPE_CHECKING:  # registering the names loads no torch; building a model does
    import torch.nn as nn


def _resnet200() -> nn.Module:
    from dlbench import vision  # noqa: F401, I001 - first: a torchvision made for another torch fails in one line
    from torchvision.models.resnet import Bottleneck, ResNet

    # fb.resnet.torch's ResNet-200: bottleneck blocks [3, 24, 36, 3].
    return ResNet(Bottleneck, [3, 24, 36, 3])


register(ModelEntry("alexnet", "AlexNet", torchvision("alexnet")))
register(ModelEntry("googlenet", "Inception-V1", torchvision("googlenet", aux_logits=False, init_weights=True)),
         aliases=("inception-v1", "inception_v1"))
for _name, _title in (("vgg16", "VGG-16"), ("vgg19", "VGG-19"), ("resnet18", "ResNet-18"), ("resnet34", "ResNet-34"),
                      ("resnet50", "ResNet-50"), ("resnet101", "ResNet-101"), ("resnet152", "ResNet-152")):
    register(ModelEntry(_name, _title, torchvision(_name)))
register(ModelEntry("resnet200", "ResNet-200", _resnet200))
