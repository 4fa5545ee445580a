"""HAMi device plugin for the ACME NPU (example third-party plugin)."""

__version__ = "0.1.0"
