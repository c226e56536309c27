"""``ModelSummary`` and ``RichModelSummary``: the module's layers and parameter counts, printed when fit starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fabricx.train.callbacks.base import Callback
from fabricx.train.module.summary import (
    ModelSummary as Summary,
)
from fabricx.train.module.summary import (
    format_summary_table,
    get_formatted_model_size,
    get_human_readable_count,
    summarize,
)
from fabricx.utilities.imports import lazy_import
from fabricx.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from fabricx.train.module.module import TrainModule
    from fabricx.train.trainer import Trainer


class ModelSummary(Callback):
    """Print Lightning's text table of the module's layers (name, type, parameters, mode, FLOPs, and in/out sizes
    when the module has an `example_input_array`) and its totals on global rank zero when ``fit`` starts.
    ``max_depth=0`` prints nothing, ``-1`` every layer. Override the static `summarize` to report it elsewhere.

    Example:
        ```python
        Trainer(callbacks=[ModelSummary(max_depth=2)])
        ```
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        self._max_depth: int = max_depth
        self._summarize_kwargs: dict[str, Any] = summarize_kwargs

    @property
    def max_depth(self) -> int:
        return self._max_depth

    def on_fit_start(self, trainer: Trainer, pl_module: TrainModule) -> None:
        if not self._max_depth:
            return
        summary = self._summary(trainer, pl_module)
        data = summary._get_summary_data()
        if trainer.is_global_zero:
            self.summarize(
                data,
                summary.total_parameters,
                summary.trainable_parameters,
                summary.model_size,
                summary.total_training_modes,
                total_flops=summary.total_flops,
                **self._summarize_kwargs,
            )

    def _summary(self, trainer: Trainer, pl_module: TrainModule) -> Summary:
        return summarize(pl_module, max_depth=self._max_depth)

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        """Print the table (`summary_data` is its columns: header, cells)."""
        table = format_summary_table(
            total_parameters, trainable_parameters, model_size, total_training_modes, total_flops, *summary_data
        )
        rank_zero_info("\n" + table)


class RichModelSummary(ModelSummary):
    """`ModelSummary` as a rich table; the Trainer's default while its progress bar is the `RichProgressBar`.
    ``header_style`` (default ``"bold magenta"``) styles the header; ``console_kwargs`` go to rich's ``Console``.

    Example:
        ```python
        Trainer(callbacks=[RichModelSummary(max_depth=2)])
        ```
    """

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        console_kwargs = summarize_kwargs.get("console_kwargs")
        rich_console = lazy_import("rich.console")
        console = rich_console.Console(**console_kwargs) if console_kwargs else lazy_import("rich").get_console()
        Table = lazy_import("rich.table").Table

        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        names = [name for name, _ in summary_data]
        table.add_column(" ", style="dim")
        table.add_column("Name", justify="left", no_wrap=True)
        table.add_column("Type")
        table.add_column("Params", justify="right")
        if "Params per Device" in names:
            table.add_column("Params per Device", justify="right")
        table.add_column("Mode")
        table.add_column("FLOPs", justify="right")
        for name in ("In sizes", "Out sizes"):
            if name in names:
                table.add_column(name, justify="right", style="white")
        for row in zip(*(cells for _, cells in summary_data), strict=True):
            table.add_row(*row)
        console.print(table)

        counts = [trainable_parameters, total_parameters - trainable_parameters, total_parameters]
        cells = [f"{get_human_readable_count(int(count)):<10}" for count in counts]
        grid = Table.grid(expand=True)
        grid.add_column()
        grid.add_column()
        grid.add_row(f"[bold]Trainable params[/]: {cells[0]}")
        grid.add_row(f"[bold]Non-trainable params[/]: {cells[1]}")
        grid.add_row(f"[bold]Total params[/]: {cells[2]}")
        grid.add_row(f"[bold]Total estimated model params size (MB)[/]: {get_formatted_model_size(model_size):<10}")
        grid.add_row(f"[bold]Modules in train mode[/]: {total_training_modes['train']}")
        grid.add_row(f"[bold]Modules in eval mode[/]: {total_training_modes['eval']}")
        grid.add_row(f"[bold]Total FLOPs[/]: {get_human_readable_count(total_flops)}")
        console.print(grid)


__all__ = ["ModelSummary", "RichModelSummary"]
