"""Model registry: one entry per model; torchvision classifiers and timm:<name> by name."""
