"""ovm-offline: extract Linux processes from recorded or paused VM memory into CRIU images."""

__version__ = "0.1.0"
