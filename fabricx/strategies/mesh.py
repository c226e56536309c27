"""The device mesh of the DTensor strategies (FSDP2, tensor parallel), described once and built once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclass(frozen=True)
class MeshLayout:
    """The shape of a device mesh and its dimension names (each strategy checks the shape against its flags).

    Example:
        ```python
        layout = MeshLayout((2, 4), ("replicate", "shard"))
        mesh = layout.build("cuda")
        ```
    """

    shape: tuple[int, ...]
    names: tuple[str, ...] | None = None

    def build(self, device_type: str) -> DeviceMesh:
        """The `DeviceMesh` over all ranks of the default process group (call once the group exists)."""
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(device_type, self.shape, mesh_dim_names=self.names)
