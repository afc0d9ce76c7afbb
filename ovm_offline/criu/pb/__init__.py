"""Generated protobuf modules for CRIU images; do not edit: see proto/README.md.

The .proto files are package-less, like CRIU's, so that message names (and
therefore crit's JSON) match upstream.
"""

from . import criu_common_pb2, criu_display_pb2, criu_files_pb2, criu_mm_pb2, criu_net_pb2, criu_ns_pb2, criu_task_pb2, criu_x86_pb2

__all__ = ["criu_common_pb2", "criu_display_pb2", "criu_files_pb2", "criu_mm_pb2", "criu_net_pb2", "criu_ns_pb2", "criu_task_pb2", "criu_x86_pb2"]
