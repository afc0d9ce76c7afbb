"""Volatility 3 plugins over ovm-offline's library.

    vol -p plugins -f guest.kdump-zlib linux.ovm.Ps
    vol -p plugins -f guest.elf linux.ovm.CrossView

Importing this module also registers ovm-offline's kdump layer, so Volatility's own plugins
read QEMU's kdump-compressed dumps too.
"""

from __future__ import annotations

from collections.abc import Iterator

from volatility3.framework import interfaces, renderers
from volatility3.framework.configuration import requirements
from volatility3.framework.renderers import format_hints

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


class CrossView(interfaces.plugins.PluginInterface):
    """Every task any of the kernel's views holds, with a column per view, and where they
    disagree (ovm-offline's ps --check; Volatility 2's linux_psxview, for a snapshot). Not
    named Ps*: Volatility takes a plugin name's prefix, and linux.ovm.Ps would match both."""

    _required_framework_version = (2, 0, 0)
    _version = (1, 0, 0)

    @classmethod
    def get_requirements(cls) -> list[interfaces.configuration.RequirementInterface]:
        return [requirements.ModuleRequirement(name="kernel", description="Linux kernel", architectures=["Intel64"])]

    def _generator(self, views) -> Iterator[tuple[int, tuple]]:
        about: dict[int, list[str]] = {}
        for d in views.disagreements:
            about.setdefault(d.task, []).append(str(d))
        for s in sorted(views.tasks.values(), key=lambda s: (s.pid is None, s.pid or 0, s.address)):
            yield (
                0,
                (
                    s.pid if s.pid is not None else renderers.NotAvailableValue(),
                    s.tgid if s.tgid is not None else renderers.NotAvailableValue(),
                    s.comm,
                    format_hints.Hex(s.address),
                    *(name in s.views for name in views.views),
                    "; ".join(about.get(s.address, ())),
                ),
            )
        for d in about.get(0, ()):
            yield (
                0,
                (renderers.NotApplicableValue(),) * 3 + (format_hints.Hex(0),) + (False,) * len(views.views) + (d,),
            )

    def run(self) -> renderers.TreeGrid:
        source = VolatilityLayerSource(self.context, self.config["kernel"])
        prog = inventory.open_kernel(source, isf=source.isf_path) if source.isf_path else inventory.open_kernel(source)
        views = inventory.read_checked_process_list(prog).views
        columns = [("PID", int), ("TGID", int), ("Comm", str), ("task_struct", format_hints.Hex)]
        columns += [(name, bool) for name in views.views] + [("Disagreements", str)]
        return renderers.TreeGrid(columns, self._generator(views))


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
            requirements.BooleanRequirement(
                name="accept_inconsistent_views",
                description="Dump a tree the kernel's views of its tasks disagree about (see CrossView)",
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
            accept_inconsistent_views=bool(self.config.get("accept_inconsistent_views")),
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
