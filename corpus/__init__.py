"""The guest corpus: real Debian kernels booted in QEMU, workloads, dumps and golden CRIU images.

Everything ovm-offline does is checked against what this package records.
"""
