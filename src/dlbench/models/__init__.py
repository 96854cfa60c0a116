"""Models: the registry (models/registry.py) and the built-in models, which register here by
name without loading torch (a builder imports its model's module); `dlbench models` lists them
in this order."""

from dlbench.models import classifiers, unet3d_config  # noqa: F401, I001 - imported to register
from dlbench.models import registry  # noqa: E402
from dlbench.models.registry import ModelEntry, built, register  # noqa: E402

register(ModelEntry("unet2d-medical", "U-Net (original)", built("dlbench.models.unet2d", "unet2d_medical"),
                    (1, 572, 572), "segment"))
register(ModelEntry("unet2d", "U-Net (padded)", built("dlbench.models.unet2d", "unet2d"), (1, 512, 512), "segment"))

from dlbench.models import gpt_config  # noqa: F401, E402 - imported to register: the language models, listed last

registry.BUILT_IN.extend([*registry.MODELS.values(), *registry.FAMILIES.values()])  # before any plug-in's
