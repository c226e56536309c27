"""The documentation site builds in strict mode, and its API reference documents every public name of API.md.

The names are read from shared/API.md (beside the repository) where it exists; the same names are also
listed here, so the check runs, and fails for real, without that file.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
API_MD_CANDIDATES = (REPO.parent / "shared" / "API.md", REPO / "shared" / "API.md")

# What API.md promises, by owner: class name -> members (methods, properties, attributes).
KNOWN: dict[str, set[str]] = {
    "Fabric": {
        "device", "global_rank", "local_rank", "node_rank", "world_size", "is_global_zero", "accelerator",
        "strategy", "logger", "loggers", "launch", "setup", "setup_module", "setup_optimizers",
        "setup_dataloaders", "backward", "clip_gradients", "autocast", "to_device", "print", "barrier",
        "broadcast", "all_gather", "all_reduce", "rank_zero_first", "no_backward_sync", "init_module",
        "init_tensor", "save", "load", "load_raw", "call", "log", "log_dict", "seed_everything", "accumulate",
        "unwrap", "save_weights",
    },
    "CSVLogger": {"log_metrics", "log_hyperparams", "finalize", "log_dir"},
    "TensorBoardLogger": {"log_metrics", "log_hyperparams", "finalize", "log_dir"},
    "TrainModule": {
        "training_step", "validation_step", "test_step", "predict_step", "configure_optimizers", "log",
        "log_dict", "on_fit_start", "on_fit_end", "on_train_epoch_start", "on_train_epoch_end",
        "on_train_batch_start", "on_train_batch_end", "on_validation_epoch_start", "on_validation_epoch_end",
        "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_save_checkpoint",
        "on_load_checkpoint", "fabric", "trainer", "device", "global_step", "current_epoch",
    },
    "Trainer": {"fit", "validate", "test", "predict", "fabric", "global_step", "current_epoch",
                "callback_metrics", "should_stop"},
    "ModelCheckpoint": set(), "EarlyStopping": set(), "LearningRateMonitor": set(), "RichProgressBar": set(),
    "RichModelSummary": set(),
    "DDPStrategy": set(), "FSDPStrategy": set(), "DeepSpeedStrategy": set(), "ModelParallelStrategy": set(),
    "CheckpointManager": {"next_path", "latest", "apply_retention"},
    "Accelerator": {
        "prepare", "backward", "accumulate", "clip_grad_norm_", "clip_grad_value_", "autocast", "unwrap_model",
        "wait_for_everyone", "save", "save_model", "print", "gather", "gather_for_metrics", "save_state",
        "load_state", "register_for_checkpointing", "device", "is_main_process", "is_local_main_process",
        "process_index", "num_processes", "sync_gradients",
    },
    "ProjectConfiguration": set(), "DataLoaderConfiguration": set(),
}
FABRIC_FLAGS = {"accelerator", "strategy", "devices", "num_nodes", "precision", "plugins", "callbacks", "loggers"}
CLI_COMMANDS = {"run", "consolidate", "env"}


# -- reading API.md ---------------------------------------------------------------------------------------
def _paragraph(text: str, start: str) -> str:
    index = text.find(start)
    assert index >= 0, f"API.md has no paragraph starting {start!r}; update this test's parser"
    end = text.find("\n\n", index)
    return text[index: end if end >= 0 else len(text)]


def _identifiers(fragment: str) -> set[str]:
    """Bare names in backticks: `name`, `name(...)` and `self.name(...)`; dotted paths and patterns are skipped."""
    names = set()
    for token in re.findall(r"`([^`]+)`", fragment):
        match = re.match(r"^(?:self\.)?([A-Za-z_]\w*)(?:\(|$)", token)
        if match:
            names.add(match.group(1))
    return names


def parse_api_md(text: str) -> dict[str, set[str]]:
    """Owner -> names promised by API.md's prose (the sections as the file lays them out)."""
    found: dict[str, set[str]] = {}
    found["Fabric"] = _identifiers(_paragraph(text, "Properties:")) | _identifiers(
        _paragraph(text, "Methods with Fabric's names")
    )
    added = text[text.find("Added by fabricx"): text.find("Loggers as in Lightning Fabric")]
    found["Fabric"] |= {m for m in re.findall(r"^\* `(\w+)", added, flags=re.M)}
    loggers = _paragraph(text, "Loggers as in Lightning Fabric")
    for cls in ("CSVLogger", "TensorBoardLogger"):
        assert cls in loggers
        found[cls] = {"log_metrics", "log_hyperparams", "finalize", "log_dir"} & _identifiers(loggers)
    train = _paragraph(text, "`TrainModule` is")
    module_part, trainer_part = train.split("`Trainer(", 1)
    trainer_part, callbacks_part = trainer_part.split("Callbacks are importable", 1)
    found["TrainModule"] = _identifiers(module_part) - {"TrainModule"}
    found["Trainer"] = _identifiers("`Trainer(" + trainer_part) - {"Trainer", "Fabric", "TrainModule"}
    for cls in _identifiers(callbacks_part):
        found[cls] = set()
    for cls in re.findall(r"`(\w+Strategy)\(", text):
        if cls != "Strategy":
            found.setdefault(cls, set())
    if "fabricx.compat.accelerate.Accelerator" in text:
        found.setdefault("Accelerator", set())
    return found


def _api_md_text() -> str | None:
    for path in API_MD_CANDIDATES:
        if path.is_file():
            return path.read_text()
    return None


def test_the_parser_reads_api_md_like_the_known_list() -> None:
    text = _api_md_text()
    if text is None:
        text = _EMBEDDED_SAMPLE  # shape of API.md: the parser still has to work
    parsed = parse_api_md(text)
    assert len(parsed["Fabric"]) >= 30, parsed["Fabric"]
    assert {"accumulate", "unwrap", "save", "load", "launch", "global_rank"} <= parsed["Fabric"]
    assert {"training_step", "configure_optimizers", "log"} <= parsed["TrainModule"]
    assert {"fit", "global_step", "should_stop"} <= parsed["Trainer"]
    assert {"ModelCheckpoint", "RichModelSummary", "DDPStrategy", "ModelParallelStrategy"} <= set(parsed)


# -- the built site ------------------------------------------------------------------------------------------
class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


# The `site` fixture (one strict build per test session) is in tests/docs/conftest.py.


def _page(site: Path, name: str) -> _Collector:
    collector = _Collector()
    collector.feed((site / "reference" / name / "index.html").read_text())
    return collector


def _reference_ids(site: Path) -> set[str]:
    ids: set[str] = set()
    for page in (site / "reference").glob("*/index.html"):
        collector = _Collector()
        collector.feed(page.read_text())
        ids |= {i for i in collector.ids if i.startswith("fabricx.")}
    return ids


def _missing(ids: set[str], expected: dict[str, set[str]]) -> list[str]:
    missing = []
    for owner, members in expected.items():
        if not any(i.endswith(f".{owner}") for i in ids):
            missing.append(owner)
        for member in members:
            if not any(i.endswith(f".{owner}.{member}") for i in ids):
                missing.append(f"{owner}.{member}")
    return sorted(missing)


def test_every_public_name_of_api_md_is_in_the_reference(site: Path) -> None:
    ids = _reference_ids(site)
    assert len(ids) > 300, "the reference pages hold fewer documented objects than expected"
    expected = {owner: set(members) for owner, members in KNOWN.items()}
    text = _api_md_text()
    if text is not None:
        for owner, members in parse_api_md(text).items():
            expected.setdefault(owner, set()).update(members)
    assert _missing(ids, expected) == []


def test_fabric_page_documents_each_constructor_flag_and_the_cli_page_each_command(site: Path) -> None:
    fabric_text = " ".join(_page(site, "fabric").text)
    for flag in FABRIC_FLAGS:
        assert re.search(rf"\b{flag}\b", fabric_text), flag
    cli_text = " ".join(_page(site, "cli").text)
    for command in CLI_COMMANDS:
        assert f"fabricx {command}" in cli_text, command


def test_every_guide_and_the_benchmark_table_are_built(site: Path) -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    pages = re.findall(r":\s+([\w/-]+)\.md", nav)
    assert len(pages) >= 25
    for page in pages:
        built = site / (page.removesuffix("index") if page == "index" else page) / "index.html"
        built = site / "index.html" if page == "index" else built
        assert built.is_file(), page
    benchmarks = (site / "benchmarks" / "index.html").read_text()
    assert "Training-loop overhead (1 process)" in benchmarks and "1.0 is" in benchmarks
    assert (site / "assets" / "benchmarks.png").is_file()


def test_a_missing_name_is_reported() -> None:
    ids = {"fabricx.fabric.Fabric", "fabricx.fabric.Fabric.setup"}
    assert _missing(ids, {"Fabric": {"setup", "launch"}, "Trainer": set()}) == ["Fabric.launch", "Trainer"]


# The layout of API.md's sections that the parser relies on, used when shared/API.md is not beside the repo.
_EMBEDDED_SAMPLE = """
| strategy | `DDPStrategy(...)`, `FSDPStrategy(...)`, `DeepSpeedStrategy(...)`, `ModelParallelStrategy(fn)` |

Properties: `device`, `global_rank`, `local_rank`, `node_rank`, `world_size`, `is_global_zero`,
`accelerator`, `strategy`, `logger`, `loggers`.

Methods with Fabric's names and meaning: `launch(fn=None, *args)`, `setup(module, *optimizers,
scheduler=None, move_to_device=True)`, `setup_module`, `setup_optimizers`,
`setup_dataloaders(*loaders, use_distributed_sampler=True, move_to_device=True)`,
`backward(loss, model=None)`, `clip_gradients(module, optimizer, clip_val=None, max_norm=None,
norm_type=2.0, error_if_nonfinite=True)`, `autocast()`, `to_device(obj)`, `print`, `barrier`,
`broadcast`, `all_gather` (unequal shapes allowed), `all_reduce`, `rank_zero_first`,
`no_backward_sync(module, enabled=True)`, `init_module(empty_init=None)`, `init_tensor()`,
`save(path, state, filter=None)`, `load(path, state=None, strict=True)` (returns what it did not
restore), `load_raw`, `call(hook, ...)`, `log`, `log_dict`, `seed_everything`.

Added by fabricx (names may be refined, behaviour may not):

* `accumulate(module)`: a context for one micro-batch.
* `unwrap(obj)` to get the user's own module or optimizer back.

Loggers as in Lightning Fabric: `fabricx.loggers.CSVLogger(root_dir, name=..., version=None)` and
`TensorBoardLogger(root_dir, name=..., version=None)`, each with `log_metrics`, `log_hyperparams`,
`finalize`, `log_dir`.

`TrainModule` is a `torch.nn.Module` with LightningModule-shaped hooks: `training_step`,
`validation_step`, `test_step`, `predict_step`, `configure_optimizers`, `self.log(name, value)`,
`on_*` hooks. `Trainer(<every Fabric flag>, max_epochs)` drives it with `fit(module, train_loader)`,
`validate`, `test`, `predict`, through a `Fabric`. The trainer exposes `fabric`, `global_step`,
`current_epoch`, `callback_metrics`, `should_stop`. Callbacks are importable
from `fabricx.callbacks` (`ModelCheckpoint`, `EarlyStopping`, `LearningRateMonitor`, `RichProgressBar`,
`RichModelSummary`).

`fabricx.compat.accelerate.Accelerator`
"""
