"""Process environment of a backend: visible-device variables and exported prefixes."""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import ClassVar

from accel._checks import check_index_list


class RuntimeEnvMixin:
    """Environment handling parametrised by two class attributes.

    ``visible_devices_env_names``: variables that restrict the devices a process sees
    (``("CUDA_VISIBLE_DEVICES",)`` on CUDA). ``exported_env_prefixes``: prefixes of the
    variables a multi-node launcher forwards to remote ranks.
    """

    visible_devices_env_names: ClassVar[tuple[str, ...]]
    exported_env_prefixes: ClassVar[tuple[str, ...]]

    def visible_devices_envs(self) -> list[str]:
        """Names of the variables that restrict which devices a process sees."""
        return list(self.visible_devices_env_names)

    def set_visible_devices_envs(
        self, current_env: MutableMapping[str, str], local_accelerator_ids: Sequence[int]
    ) -> None:
        """Set each visible-devices variable in ``current_env`` to ``"i,j,..."``."""
        if not isinstance(current_env, MutableMapping):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(
                "current_env must be a mutable mapping such as os.environ or a dict, "
                f"got {type(current_env).__name__}"
            )
        ids = check_index_list(local_accelerator_ids, "local_accelerator_ids")
        if not self.visible_devices_env_names:
            # Writing nothing would silently leave every device visible to the child.
            raise RuntimeError(
                f"{type(self).__name__} knows no environment variable that restricts its "
                "visible devices"
            )
        value = ",".join(map(str, ids))
        for name in self.visible_devices_env_names:
            current_env[name] = value

    def export_envs(self) -> list[str]:
        """Prefixes of variables a launcher must forward to remote ranks."""
        return list(self.exported_env_prefixes)
