"""What the DeepSpeed integration adds to accel's commands: ``accel run --deepspeed`` and
the ``deepspeed`` section of ``accel report`` (registered in pyproject.toml under
``accel.integrations``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from typing_extensions import override

from accel.extensions import Arguments, Integration, ReportSection
from accel.integrations.deepspeed._support import ENV

if TYPE_CHECKING:
    import argparse
    from collections.abc import MutableMapping

    from accel.protocols import Accelerator


class DeepSpeedIntegration(Integration):
    """``--deepspeed`` for ``accel run`` and DeepSpeed's status in ``accel report``."""

    @override
    def add_launch_arguments(self, arguments: Arguments) -> None:
        """Add ``--deepspeed``."""
        arguments.add_argument(
            "--deepspeed",
            action="store_true",
            help=f"run DeepSpeed on accel in every rank (sets {ENV}=1; docs/deepspeed.md)",
        )

    @override
    def apply_launch(self, args: argparse.Namespace, environ: MutableMapping[str, str]) -> None:
        """With ``--deepspeed``, set ``ACCEL_DEEPSPEED=1`` for the ranks, whose start-up
        hook then installs the integration when they import deepspeed.

        Raises:
            ValueError: ``--deepspeed`` without deepspeed, or with a release the
                integration does not support.
        """
        if not args.deepspeed:
            return
        from accel.integrations.deepspeed._install import check_supported

        try:
            check_supported()
        except (ImportError, RuntimeError) as error:
            raise ValueError(f"--deepspeed: {error}") from error
        environ[ENV] = "1"

    @override
    def report_section(self, accelerator: Accelerator) -> ReportSection:
        """DeepSpeed's version, whether it is supported and active, and which of its
        builders accel serves for the selected device (no deepspeed import)."""
        from accel.integrations.deepspeed.status import collect, describe

        status = collect(accelerator.device_name())
        return ReportSection(asdict(status), describe(status))
