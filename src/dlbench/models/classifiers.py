"""The image classifiers of the seeds (004's cnn-benchmarks, 002's ResNet-50), from torchvision."""

from __future__ import annotations

import torch.nn as nn
from torchvision.models.resnet import Bottleneck, ResNet

from dlbench.models.registry import ModelEntry, register, torchvision


def _resnet200() -> nn.Module:
    # fb.resnet.torch's ResNet-200: bottleneck blocks [3, 24, 36, 3].
    return ResNet(Bottleneck, [3, 24, 36, 3])


register(ModelEntry("alexnet", "AlexNet", torchvision("alexnet")))
register(ModelEntry("googlenet", "Inception-V1", torchvision("googlenet", aux_logits=False, init_weights=True)),
         aliases=("inception-v1", "inception_v1"))
for _name, _title in (("vgg16", "VGG-16"), ("vgg19", "VGG-19"), ("resnet18", "ResNet-18"), ("resnet34", "ResNet-34"),
                      ("resnet50", "ResNet-50"), ("resnet101", "ResNet-101"), ("resnet152", "ResNet-152")):
    register(ModelEntry(_name, _title, torchvision(_name)))
register(ModelEntry("resnet200", "ResNet-200", _resnet200))
