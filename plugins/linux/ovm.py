"""Volatility 3 plugins over ovm-offline's library.

    vol -p plugins -f guest.kdump-zlib linux.ovm.Ps

Importing this module also registers ovm-offline's kdump layer, so Volatility's own plugins
read QEMU's kdump-compressed dumps too.
"""

from __future__ import annotations

from collections.abc import Iterator

from volatility3.framework import interfaces, renderers
from volatility3.framework.configuration import requirements

from ovm_offline import inventory
from ovm_offline.volatility import layers  # noqa: F401  registers the kdump layer and stacker
from ovm_offline.volatility.source import VolatilityLayerSource


class Ps(interfaces.plugins.PluginInterface):
    """Processes with their PID-namespace PIDs, cgroups and containers (ovm-offline's ps)."""

    _required_framework_version = (2, 0, 0)
    _version = (1, 0, 0)

    @classmethod
    def get_requirements(cls) -> list[interfaces.configuration.RequirementInterface]:
        return [
            requirements.ModuleRequirement(name="kernel", description="Linux kernel", architectures=["Intel64"]),
            requirements.BooleanRequirement(
                name="user_only", description="Leave out kernel threads", default=False, optional=True
            ),
        ]

    def _generator(self) -> Iterator[tuple[int, tuple]]:
        source = VolatilityLayerSource(self.context, self.config["kernel"])
        prog = inventory.open_kernel(source, isf=source.isf_path) if source.isf_path else inventory.open_kernel(source)
        for p in inventory.list_processes(prog):
            if self.config.get("user_only") and p.kthread:
                continue
            yield (
                0,
                (
                    p.pid,
                    p.ppid,
                    p.nthreads,
                    p.state,
                    p.cpus_text(),
                    p.ns_pid,
                    p.cgroup or renderers.NotAvailableValue(),
                    p.container or renderers.NotApplicableValue(),
                    p.comm,
                ),
            )

    def run(self) -> renderers.TreeGrid:
        return renderers.TreeGrid(
            [
                ("PID", int),
                ("PPID", int),
                ("Threads", int),
                ("State", str),
                ("CPU", str),
                ("NsPID", int),
                ("Cgroup", str),
                ("Container", str),
                ("Comm", str),
            ],
            self._generator(),
        )


class Dump(interfaces.plugins.PluginInterface):
    """Save a process and its descendants as CRIU images (ovm-offline's dump)."""

    _required_framework_version = (2, 0, 0)
    _version = (1, 0, 0)

    @classmethod
    def get_requirements(cls) -> list[interfaces.configuration.RequirementInterface]:
        return [
            requirements.ModuleRequirement(name="kernel", description="Linux kernel", architectures=["Intel64"]),
            requirements.IntRequirement(name="pid", description="Global PID of the process to save"),
            requirements.StringRequirement(name="images_dir", description="Directory for the CRIU images"),
            requirements.BooleanRequirement(
                name="force", description="Replace a non-empty images directory", default=False, optional=True
            ),
            requirements.BooleanRequirement(
                name="file_locks",
                description="Save file locks and leases (criu's --file-locks; restore with it too)",
                default=False,
                optional=True,
            ),
            requirements.IntRequirement(
                name="ghost_limit",
                description="The most bytes a file unlinked while open may hold to be saved (criu's --ghost-limit)",
                default=1 << 20,
                optional=True,
            ),
        ]

    def _generator(self) -> Iterator[tuple[int, tuple]]:
        from ovm_offline import dump

        source = VolatilityLayerSource(self.context, self.config["kernel"])
        prog = inventory.open_kernel(source, isf=source.isf_path) if source.isf_path else inventory.open_kernel(source)
        summary = dump.dump(
            source,
            prog,
            self.config["pid"],
            self.config["images_dir"],
            force=self.config.get("force"),
            file_locks=bool(self.config.get("file_locks")),
            ghost_limit=int(self.config.get("ghost_limit") or 1 << 20),
        )
        yield (
            0,
            (
                summary.pid,
                summary.comm,
                summary.processes,
                summary.threads,
                summary.images,
                summary.pages,
                str(summary.directory),
            ),
        )

    def run(self) -> renderers.TreeGrid:
        return renderers.TreeGrid(
            [
                ("PID", int),
                ("Comm", str),
                ("Processes", int),
                ("Threads", int),
                ("Images", int),
                ("Pages", int),
                ("Directory", str),
            ],
            self._generator(),
        )
