"""Regenerate the checked-in kubelet device-plugin stubs from ``deviceplugin/v1beta1/api.proto``.

Run from the repository root (needs ``grpcio-tools``, a test dependency)::

    python -m hami_core.node.regen

(:func:`hami_core.protogen.generate` runs protoc and prefixes each stub with :data:`HEADER`, so ruff skips
generated code). ``tests/node/test_proto.py`` regenerates into a temporary folder and checks the result is
byte-identical.
"""

from __future__ import annotations

from pathlib import Path

from hami_core import protogen
from hami_core.protogen import OUTPUTS, repo_root

__all__ = ["HEADER", "OUTPUTS", "PROTO", "generate", "main", "repo_root"]

PROTO = "hami_core/node/deviceplugin/v1beta1/api.proto"
HEADER = protogen.header("python -m hami_core.node.regen")


def generate(out_dir: Path, root: Path | None = None) -> dict[str, str]:
    """Run protoc on the proto into ``out_dir``; return ``{file name: text with HEADER}``."""
    return protogen.generate(PROTO, out_dir, HEADER, root)


def main() -> int:
    target = repo_root() / Path(PROTO).parent
    generate(target)
    print(f"regenerated {', '.join(OUTPUTS)} in {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
