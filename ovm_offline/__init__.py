"""ovm-offline: extract Linux processes from recorded or paused VM memory into CRIU images."""

from .dataclass_code import install as _install_dataclass_code

__version__ = "0.1.0"

# before any of our dataclasses is defined: their methods' compiled code comes from the cache
_install_dataclass_code()
