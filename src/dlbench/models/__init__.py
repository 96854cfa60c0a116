"""Models: the registry (models/registry.py) and the built-in models, which register themselves
when imported here; `dlbench models` lists them in this order."""

from dlbench import vision  # noqa: F401, I001 - first: a torchvision made for another torch fails in one line
from dlbench.models import classifiers, unet3d, unet2d  # noqa: F401, I001 - imported to register
from dlbench.models import registry  # noqa: E402

registry.BUILT_IN.extend([*registry.MODELS.values(), *registry.FAMILIES.values()])  # before any plug-in's
