"""Data: volumes (HDF5, zarr, N5), their generator, augmentation, targets, patches and blocking."""
