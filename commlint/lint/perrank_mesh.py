"""Device meshes in the per-rank interpreter (`perrank.Rank`)."""

from __future__ import annotations

from commlint.lint.perrank_model import Group


class Meshes:
    """`Rank`'s device meshes."""

    def mesh_group_of(self, mesh: object, line: int) -> Group | None:
        return None
