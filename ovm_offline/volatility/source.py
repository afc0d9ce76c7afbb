"""A Volatility 3 physical layer as a PhysicalSource, so plugins run the same library code as
the CLI: Volatility finds the bytes, ovm-offline says what they mean."""

from __future__ import annotations

from typing import BinaryIO
from urllib.parse import unquote, urlparse

from volatility3.framework import exceptions, interfaces

from ..errors import SourceError
from ..sources.base import PhysicalRun, VcpuState, iter_chunks

__all__ = ["VolatilityLayerSource"]


COPY_CHUNK = 4 << 20


class VolatilityLayerSource:
    """Guest-physical memory as Volatility's physical layer under a kernel module presents it."""

    format_name = "Volatility layer"

    def __init__(self, context: interfaces.context.ContextInterface, kernel_module_name: str) -> None:
        kernel = context.modules[kernel_module_name]
        translation = context.layers[kernel.layer_name]
        self.layer_name = translation.config["memory_layer"]
        self._layer = context.layers[self.layer_name]
        self._runs = self._find_runs()
        self.isf_path = _isf_path(context, kernel.symbol_table_name)

    def _find_runs(self) -> list[PhysicalRun]:
        runs: list[PhysicalRun] = []
        for offset, length, *_ in self._layer.mapping(0, self._layer.maximum_address, ignore_errors=True):
            if runs and runs[-1].start + runs[-1].length == offset:
                runs[-1] = PhysicalRun(runs[-1].start, runs[-1].length + length)
            else:
                runs.append(PhysicalRun(offset, length))
        return runs

    def runs(self) -> list[PhysicalRun]:
        return list(self._runs)

    def read(self, paddr: int, length: int) -> bytes:
        try:
            return self._layer.read(paddr, length, pad=False)
        except exceptions.InvalidAddressException as e:
            raise SourceError(
                f"{self.layer_name}: guest-physical 0x{paddr:x}+{length} is not in the dump ({e})"
            ) from None

    def copy_to(self, paddr: int, length: int, out: BinaryIO) -> None:
        for address, size in iter_chunks(paddr, length, COPY_CHUNK):
            out.write(self.read(address, size))

    def vcpus(self) -> list[VcpuState]:
        return []

    def vmcoreinfo(self) -> dict[str, str] | None:
        return None

    def close(self) -> None:
        pass

    def __enter__(self) -> VolatilityLayerSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isf_path(context: interfaces.context.ContextInterface, table_name: str) -> str | None:
    """The local file of the ISF Volatility chose, so our code reads the same symbols."""
    try:
        url = context.symbol_space[table_name].config.get("isf_url")
    except (KeyError, AttributeError):
        return None
    parsed = urlparse(url or "")
    return unquote(parsed.path) if parsed.scheme == "file" else None
