"""Data: readers, generators and metrics for the workloads' data sets."""
