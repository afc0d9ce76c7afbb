"""A Volatility 3 data layer for kdump-compressed dumps (flattened and plain) and its stacker.

Volatility 3 (2.28) opens ELF cores but not QEMU's kdump output. Importing this module is enough:
the LayerStacker automagic finds every StackerLayerInterface subclass, so
`vol -f guest.kdump-zlib linux.pslist` stacks KdumpLayer on the file, then the Intel layer on it.
The format work is ovm_offline.sources.kdump.KdumpImage, reading through the base layer.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Iterable

from volatility3.framework import constants, exceptions, interfaces
from volatility3.framework.configuration import requirements

from ..errors import SourceError
from ..sources.kdump import KdumpImage
from ..sources.magic import FLAT_SIGNATURE, KDUMP_SIGNATURE

__all__ = ["KdumpLayer", "KdumpStacker"]


vollog = logging.getLogger(__name__)


class KdumpFormatException(exceptions.LayerException):
    """The base layer is not a (valid) kdump file."""


class _LayerReader:
    """The ByteReader KdumpImage wants, over a Volatility layer."""

    def __init__(self, context: interfaces.context.ContextInterface, layer_name: str) -> None:
        self._layer = context.layers[layer_name]
        location = context.config.get(interfaces.configuration.path_join(layer_name, "location"))
        self.name = str(location or layer_name)
        self.size = self._layer.maximum_address + 1

    def pread(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise SourceError(
                f"{self.name}: read of {length} bytes at offset {offset:#x} is beyond the end of the file; truncated?"
            )
        try:
            return self._layer.read(offset, length)
        except exceptions.InvalidAddressException as exc:
            raise SourceError(f"{self.name}: cannot read offset {offset:#x}: {exc}") from None


class KdumpLayer(interfaces.layers.TranslationLayerInterface):
    """Guest-physical memory of a kdump file: pages decompressed on read.

    mapping() names this layer itself as the target (the bytes only exist after decoding), and
    read() is overridden, so scans and upper layers always come back here for decoded pages.
    """

    def __init__(
        self, context: interfaces.context.ContextInterface, config_path: str, name: str, metadata=None
    ) -> None:
        super().__init__(context=context, config_path=config_path, name=name, metadata=metadata)
        self._base_layer = self.config["base_layer"]
        try:
            self._image = KdumpImage(_LayerReader(context, self._base_layer))
        except SourceError as exc:
            raise KdumpFormatException(name, str(exc)) from None
        runs = self._image.runs()
        if not runs:
            raise KdumpFormatException(name, "kdump has no pages")
        self._runs = [(r.start, r.length) for r in runs]
        self._starts = [s for s, _ in self._runs]
        self._lock = threading.Lock()

    # -- addresses ---------------------------------------------------------------------------
    @property
    def minimum_address(self) -> int:
        return 0

    @property
    def maximum_address(self) -> int:
        start, length = self._runs[-1]
        return start + length - 1

    def _covering(self, offset: int, length: int) -> Iterable[tuple[int, int]]:
        """(start, size) of the present pieces of [offset, offset+length), in order."""
        end = offset + length
        i = max(bisect.bisect_right(self._starts, offset) - 1, 0)
        while i < len(self._runs) and offset < end:
            start, size = self._runs[i]
            lo, hi = max(offset, start), min(end, start + size)
            if lo < hi:
                yield lo, hi - lo
            if start + size >= end:
                break
            i += 1

    def is_valid(self, offset: int, length: int = 1) -> bool:
        return sum(n for _, n in self._covering(offset, length)) == length

    def mapping(
        self, offset: int, length: int, ignore_errors: bool = False
    ) -> Iterable[tuple[int, int, int, int, str]]:
        position = offset
        for start, size in self._covering(offset, length):
            if start > position and not ignore_errors:
                raise exceptions.InvalidAddressException(
                    self.name, position, f"Kdump layer has no page at {position:#x}"
                )
            yield start, size, start, size, self.name
            position = start + size
        if position < offset + length and not ignore_errors:
            raise exceptions.InvalidAddressException(self.name, position, f"Kdump layer has no page at {position:#x}")

    # -- data ---------------------------------------------------------------------------------
    def read(self, offset: int, length: int, pad: bool = False) -> bytes:
        if length <= 0:
            return b""
        if not pad:
            return self._read_present(offset, length)
        out = bytearray(length)
        for start, size in self._covering(offset, length):
            out[start - offset : start - offset + size] = self._read_present(start, size)
        return bytes(out)

    def _read_present(self, offset: int, length: int) -> bytes:
        try:
            with self._lock:
                return self._image.read(offset, length)
        except SourceError as exc:
            raise exceptions.InvalidAddressException(self.name, offset, str(exc)) from None

    def write(self, offset: int, data: bytes) -> None:
        raise exceptions.LayerException(self.name, "Kdump layers are read-only")

    @property
    def dependencies(self) -> list[str]:
        return [self._base_layer]

    @classmethod
    def get_requirements(cls) -> list[interfaces.configuration.RequirementInterface]:
        return [requirements.TranslationLayerRequirement(name="base_layer", optional=False)]

    @classmethod
    def check_header(cls, base_layer: interfaces.layers.DataLayerInterface) -> bool:
        try:
            head = base_layer.read(0, 16)
        except exceptions.InvalidAddressException:
            return False
        return head.startswith((FLAT_SIGNATURE, KDUMP_SIGNATURE))


class KdumpStacker(interfaces.automagic.StackerLayerInterface):
    """Stacks a KdumpLayer on a file layer holding a kdump (flattened or plain)."""

    stack_order = 10

    @classmethod
    def stack(
        cls,
        context: interfaces.context.ContextInterface,
        layer_name: str,
        progress_callback: constants.ProgressCallback = None,
    ) -> interfaces.layers.DataLayerInterface | None:
        if not KdumpLayer.check_header(context.layers[layer_name]):
            return None
        new_name = context.layers.free_layer_name("KdumpLayer")
        context.config[interfaces.configuration.path_join(new_name, "base_layer")] = layer_name
        try:
            return KdumpLayer(context, new_name, new_name)
        except KdumpFormatException as exc:
            vollog.log(constants.LOGLEVEL_VVVV, f"Exception: {exc}")
            return None
