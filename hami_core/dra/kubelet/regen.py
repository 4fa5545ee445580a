"""Regenerate the checked-in kubelet DRA and plugin-registration stubs from their ``api.proto`` files.

Run from the repository root (needs ``grpcio-tools``, a test dependency)::

    python -m hami_core.dra.kubelet.regen

(:func:`hami_core.protogen.generate`, as ``python -m hami_core.node.regen`` for the device-plugin API, for each of
:data:`PROTOS`, each stub prefixed with :data:`HEADER`). ``tests/dra/test_kubelet_plugin.py`` regenerates into a
temporary folder and checks the result is byte-identical.
"""

from __future__ import annotations

from pathlib import Path

from hami_core import protogen
from hami_core.protogen import OUTPUTS, repo_root

__all__ = ["HEADER", "OUTPUTS", "PROTOS", "generate", "main", "repo_root"]

PROTOS = ("hami_core/dra/kubelet/v1/api.proto", "hami_core/dra/kubelet/registration/api.proto")
HEADER = protogen.header("python -m hami_core.dra.kubelet.regen")


def generate(proto: str, out_dir: Path, root: Path | None = None) -> dict[str, str]:
    """Run protoc on ``proto`` (a path from the repository root) into ``out_dir``; ``{file name: text}``."""
    return protogen.generate(proto, out_dir, HEADER, root)


def main() -> int:
    for proto in PROTOS:
        target = repo_root() / Path(proto).parent
        generate(proto, target)
        print(f"regenerated {', '.join(OUTPUTS)} in {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
