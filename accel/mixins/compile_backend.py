"""The ``torch.compile`` backend choice, validated against torch's registry."""

from __future__ import annotations

from typing import ClassVar

from accel._checks import check_str


def registered_compile_backends() -> list[str]:
    """Every backend name ``torch.compile`` accepts in this process.

    Imports ``torch._dynamo`` (about a second), so it runs only when a backend is chosen.
    """
    import torch._dynamo

    backends: list[str] = torch._dynamo.list_backends(exclude_tags=())  # pyright: ignore[reportUnknownMemberType]
    return sorted(backends)


class CompileBackendMixin:
    """``get/set_compile_backend``, starting from ``default_compile_backend``."""

    default_compile_backend: ClassVar[str] = "inductor"
    _compile_backend: str | None = None

    def get_compile_backend(self) -> str:
        """The chosen backend name (``default_compile_backend`` until one is set)."""
        return self._compile_backend or self.default_compile_backend

    def set_compile_backend(self, backend: str) -> None:
        """Choose a registered ``torch.compile`` backend by name."""
        name = check_str(backend, "backend")
        known = registered_compile_backends()
        if name not in known:
            raise ValueError(
                f"backend {name!r} is not a registered torch.compile backend; "
                f"expected one of: {', '.join(known)}"
            )
        self._compile_backend = name
