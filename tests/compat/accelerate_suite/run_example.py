"""Run one of Accelerate's ``examples/`` scripts offline, through Accelerate or (default) through the adapter.

Usage: ``python run_example.py OUT_DIR EXAMPLE.py [script args]`` (under ``fabricx run --devices 2`` for two
processes; ``ACCELERATE_SUITE_PEER=1`` runs Accelerate itself).

Stand-ins, identical for both frameworks: ``datasets.load_dataset`` gives a synthetic MRPC (64 training, 32
validation pairs; for ``Salesforce/wikitext``, lines of text), ``evaluate.load`` an accuracy/F1 metric,
``AutoTokenizer`` a word-hashing tokenizer (a causal one for SmolLM), ``AutoModelForSequenceClassification`` a tiny
BERT and ``AutoModelForCausalLM`` a tiny Llama, initialised from the seeded global generator. Only the
Accelerator-side names are swapped (run_scripts.install_shim plus the kwargs objects, LocalSGD and
find_executable_batch_size). Writes ``OUT_DIR/rank_<r>.json``: the printed lines and a digest of the final
parameters of the first prepared model.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import runpy
import sys
import types
import zlib
from pathlib import Path
from typing import Any

import torch

PEER = os.environ.get("ACCELERATE_SUITE_PEER") == "1"
WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "tree"]
WORDS += ["fast", "slow", "red", "blue", "big", "small"]


class _Dataset:
    def __init__(self, columns: dict) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, index: int | str) -> Any:
        if isinstance(index, str):  # a column, as datasets gives it
            return self.columns[index]
        return {name: values[index] for name, values in self.columns.items()}

    @property
    def num_rows(self) -> int:
        return len(self)

    def select(self, indices) -> _Dataset:
        return _Dataset({name: [values[int(i)] for i in indices] for name, values in self.columns.items()})

    def map(self, function, batched=True, remove_columns=()):
        added = dict(function(self.columns))
        kept = {k: v for k, v in self.columns.items() if k not in remove_columns}
        return _Dataset({**kept, **added})

    def rename_column(self, old: str, new: str) -> _Dataset:
        return _Dataset({(new if k == old else k): v for k, v in self.columns.items()})

    def filter(self, function, input_columns: str) -> _Dataset:
        return self.select([i for i, value in enumerate(self.columns[input_columns]) if function(value)])


class _DatasetDict(dict):
    def map(self, *args, **kwargs):
        return _DatasetDict({k: v.map(*args, **kwargs) for k, v in self.items()})

    def rename_column(self, old: str, new: str) -> _DatasetDict:
        return _DatasetDict({k: v.rename_column(old, new) for k, v in self.items()})

    def filter(self, *args, **kwargs) -> _DatasetDict:
        return _DatasetDict({k: v.filter(*args, **kwargs) for k, v in self.items()})


def _load_dataset(*args, **kwargs) -> _DatasetDict:
    if args and args[0] == "Salesforce/wikitext":
        return _wikitext()
    rng = random.Random(0)

    def split(n: int) -> _Dataset:
        def sentence() -> str:
            return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))

        rows = [(sentence(), sentence(), rng.randint(0, 1)) for _ in range(n)]
        return _Dataset({"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows],
                         "label": [r[2] for r in rows], "idx": list(range(n))})

    return _DatasetDict(train=split(64), validation=split(32))


def _wikitext() -> _DatasetDict:
    """Lines of text, some empty (as wikitext's are): more training lines than the 500 the example selects."""
    rng = random.Random(1)

    def split(n: int) -> _Dataset:
        lines = ["" if i % 7 == 3 else " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) for i in range(n)]
        return _Dataset({"text": lines})

    return _DatasetDict(train=split(520), validation=split(40))


class _Metric:
    def __init__(self) -> None:
        self.predictions: list[int] = []
        self.references: list[int] = []

    def add_batch(self, predictions, references) -> None:
        self.predictions += torch.as_tensor(predictions).tolist()
        self.references += torch.as_tensor(references).tolist()

    def compute(self, predictions=None, references=None) -> dict:
        if predictions is not None:  # evaluate's one-call form
            self.add_batch(predictions=predictions, references=references)
        pairs = list(zip(self.predictions, self.references, strict=True))
        self.predictions, self.references = [], []
        tp = sum(p == r == 1 for p, r in pairs)
        fp = sum(p == 1 and r == 0 for p, r in pairs)
        fn = sum(p == 0 and r == 1 for p, r in pairs)
        return {"accuracy": sum(p == r for p, r in pairs) / max(len(pairs), 1),
                "f1": 2 * tp / max(2 * tp + fp + fn, 1)}


class _Tokenizer:
    pad_token_id = 0

    def _ids(self, text: str) -> list[int]:
        return [2 + zlib.crc32(w.encode()) % 90 for w in text.split()]

    def __call__(self, first, second=None, truncation=True, max_length=None, **kwargs):
        single = isinstance(first, str)
        firsts = [first] if single else list(first)
        seconds = [None] * len(firsts) if second is None else ([second] if single else list(second))
        out: dict[str, list] = {"input_ids": [], "token_type_ids": [], "attention_mask": []}
        for a, b in zip(firsts, seconds, strict=True):
            ids = [1, *self._ids(a), 1]
            types_ = [0] * len(ids)
            if b is not None:
                extra = [*self._ids(b), 1]
                ids, types_ = ids + extra, types_ + [1] * len(extra)
            out["input_ids"].append(ids)
            out["token_type_ids"].append(types_)
            out["attention_mask"].append([1] * len(ids))
        return {k: v[0] for k, v in out.items()} if single else out

    def pad(self, examples, padding="longest", max_length=None, pad_to_multiple_of=None, return_tensors="pt"):
        from transformers import BatchEncoding

        longest = max_length or max(len(e["input_ids"]) for e in examples)
        if pad_to_multiple_of:
            longest = -(-longest // pad_to_multiple_of) * pad_to_multiple_of
        batch = {}
        for key in examples[0]:
            if key in ("input_ids", "token_type_ids", "attention_mask"):
                batch[key] = torch.tensor([list(e[key]) + [0] * (longest - len(e[key])) for e in examples])
            else:
                batch[key] = torch.tensor([e[key] for e in examples])
        return BatchEncoding(batch, tensor_type=return_tensors)


class _CausalTokenizer(_Tokenizer):
    """The word-hashing tokenizer as a causal-LM tokenizer: an end-of-text token (the example pads with it) and no
    token types; ``return_attention_mask=False`` leaves the mask out, as transformers' tokenizers do."""

    eos_token = "<eos>"
    pad_token: str | None = None

    def __call__(self, first, second=None, truncation=True, max_length=None, return_attention_mask=True, **kwargs):
        texts = [first] if isinstance(first, str) else list(first)
        out: dict[str, list] = {"input_ids": [self._ids(text) for text in texts]}
        if return_attention_mask:
            out["attention_mask"] = [[1] * len(ids) for ids in out["input_ids"]]
        return {k: v[0] for k, v in out.items()} if isinstance(first, str) else out


def _install_stand_ins() -> None:
    import transformers

    datasets = types.ModuleType("datasets")
    datasets.load_dataset = _load_dataset  # type: ignore[attr-defined]
    datasets.DatasetDict = _DatasetDict  # type: ignore[attr-defined]
    evaluate = types.ModuleType("evaluate")
    evaluate.load = lambda *args, **kwargs: _Metric()  # type: ignore[attr-defined]
    sys.modules["datasets"], sys.modules["evaluate"] = datasets, evaluate
    import accelerate.data_loader

    # The real package is not installed: Accelerate must not look for its classes in the stand-in.
    accelerate.data_loader.is_datasets_available = lambda: False  # type: ignore[attr-defined]

    def tiny_bert(*args, **kwargs):
        config = transformers.BertConfig(vocab_size=96, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32, max_position_embeddings=64, num_labels=2)
        return transformers.BertForSequenceClassification(config)

    def tiny_llama(*args, **kwargs):
        config = transformers.LlamaConfig(vocab_size=96, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
        return transformers.LlamaForCausalLM(config)

    def tokenizer(name: str, *args, **kwargs) -> _Tokenizer:
        return _CausalTokenizer() if "SmolLM" in name else _Tokenizer()

    transformers.AutoTokenizer.from_pretrained = staticmethod(tokenizer)  # type: ignore[method-assign]
    transformers.AutoModelForSequenceClassification.from_pretrained = staticmethod(tiny_bert)  # type: ignore[method-assign]
    transformers.AutoModelForCausalLM.from_pretrained = staticmethod(tiny_llama)  # type: ignore[method-assign]


def _swap_accelerator_names() -> None:
    import accelerate.local_sgd
    import accelerate.utils

    import fabricx.compat.accelerate as fx

    sys.path.insert(0, str(Path(__file__).parent))
    from run_scripts import install_shim

    install_shim()
    for name in ("DDPCommunicationHookType", "DistributedDataParallelKwargs", "ProfileKwargs",
                 "find_executable_batch_size", "GradientAccumulationPlugin"):
        setattr(accelerate.utils, name, getattr(fx, name))
    accelerate.local_sgd.LocalSGD = fx.LocalSGD  # type: ignore[misc]


#: Accelerate's examples this runner knows (copies in ``examples/``), with the arguments they run with;
#: ``{work}`` is a folder of that example's own.
EXAMPLES: dict[str, list[str]] = {
    "nlp_example": ["--cpu"],
    "complete_nlp_example": ["--cpu", "--checkpointing_steps", "epoch", "--output_dir", "{work}"],
    "by_feature/automatic_gradient_accumulation": ["--cpu"],
    "by_feature/checkpointing": ["--cpu", "--checkpointing_steps", "epoch", "--output_dir", "{work}"],
    "by_feature/cross_validation": ["--cpu", "--num_folds", "2"],
    "by_feature/ddp_comm_hook": ["--cpu", "--ddp_comm_hook", "fp16"],
    "by_feature/early_stopping": ["--cpu"],
    "by_feature/gradient_accumulation": ["--cpu", "--gradient_accumulation_steps", "2"],
    # accumulation of 2 so that the example enters model.no_sync() on 2 processes
    "by_feature/gradient_accumulation_for_autoregressive_models": ["--cpu", "--gradient_accumulation_steps", "2"],
    "by_feature/local_sgd": ["--cpu", "--local_sgd_steps", "2", "--gradient_accumulation_steps", "1"],
    "by_feature/memory": ["--cpu"],
    "by_feature/multi_process_metrics": ["--cpu"],
    "by_feature/profiler": ["--cpu", "--output_trace_dir", "{work}"],
    "by_feature/schedule_free": ["--cpu"],
    "by_feature/tracking": ["--cpu", "--with_tracking", "--project_dir", "{work}"],
}
EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"


def _reset_peer_state() -> None:
    """Accelerate keeps its state in singletons: each example starts from a fresh one, as in its own process."""
    if PEER:
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state()
        GradientState._reset_state()


def run_one(example: str, args: list[str], prepared: list) -> dict:
    """Run one example script as ``__main__``; its outcome, the lines it printed that start with "epoch" or
    "Average", and a digest of the final parameters of every model it prepared."""
    prepared.clear()
    _reset_peer_state()
    printed = io.StringIO()
    sys.argv = [example, *args]
    outcome = "passed"
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(example, run_name="__main__")
    except Exception as error:  # recorded: the differential test compares outcomes too
        outcome = f"failed: {type(error).__name__}: {str(error)[:300]}"
    digests = []
    for accelerator, model in prepared:
        flat = torch.cat([p.detach().double().flatten() for p in accelerator.unwrap_model(model).parameters()])
        digests.append(hashlib.sha256(flat.numpy().tobytes()).hexdigest())
    lines = [line for line in printed.getvalue().splitlines() if line.startswith(("epoch", "Average"))]
    return {"outcome": outcome, "printed": lines, "parameters": digests}


def main() -> None:
    """``run_example.py OUT_DIR EXAMPLE.py [args]`` runs one script; ``run_example.py OUT_DIR --names N1 N2 ...``
    runs the named `EXAMPLES` in sequence in this process (``OUT_DIR/rank_<r>.json`` maps name to its record)."""
    out_dir, *rest = sys.argv[1:]
    torch.set_num_threads(1)
    _install_stand_ins()
    if not PEER:
        _swap_accelerator_names()
    import accelerate
    import torch.distributed as dist

    prepared: list = []
    cls = accelerate.Accelerator
    original_prepare = cls.prepare

    def prepare(self, *objects, **kwargs):
        result = original_prepare(self, *objects, **kwargs)
        results = result if isinstance(result, tuple) else (result,)
        prepared.extend((self, r) for r in results if isinstance(r, torch.nn.Module))
        return result

    cls.prepare = prepare  # type: ignore[method-assign]
    rank = os.environ.get("RANK", "0")
    # tracking.py logs with every installed tracker: offline, inside OUT_DIR
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_DIR", str(Path(out_dir).resolve()))
    # a database store: MLflow 3's file store (a file:// URI) refuses to open without MLFLOW_ALLOW_FILE_STORE
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{Path(out_dir).resolve() / f'mlflow-{rank}.db'}")
    real_destroy = dist.destroy_process_group
    dist.destroy_process_group = lambda group=None: None  # once, after the last example
    try:
        if rest[0] == "--names":
            records = {}
            for name in rest[1:]:
                work = Path(out_dir).resolve() / f"work-{rank}" / name.replace("/", "-")
                work.mkdir(parents=True, exist_ok=True)
                args = [a.replace("{work}", str(work)) for a in EXAMPLES[name]]
                print(f"[example {rank}] {name}", file=sys.stderr, flush=True)
                records[name] = run_one(str(EXAMPLES_DIR / f"{name}.py"), args, prepared)
                if dist.is_initialized():
                    dist.barrier()
        else:
            records = run_one(rest[0], rest[1:], prepared)
            records["parameters"] = records["parameters"][0] if records["parameters"] else None
    finally:
        dist.destroy_process_group = real_destroy
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / f"rank_{rank}.json").write_text(json.dumps(records, indent=1))
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
