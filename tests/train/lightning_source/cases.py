"""LightningModule code as a Lightning user writes it; the differential test runs it twice.

Once as is, through Lightning's Trainer; once with its three ``lightning`` import lines swapped for
fabricx's (``_lightning_differential.py`` writes both copies). Nothing else changes between the runs.
"""

import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

QUIET = {"enable_progress_bar": False, "enable_model_summary": False, "accelerator": "cpu"}


def regression(samples: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 4, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True) * 0.5 + 0.1)


def summary(trainer, module) -> dict:
    def plain(values):
        return {k: float(v) for k, v in values.items()}

    return {
        "weights": {k: v.detach().clone() for k, v in module.state_dict().items()},
        "callback_metrics": plain(trainer.callback_metrics),
        "logged_metrics": plain(trainer.logged_metrics),
        "global_step": trainer.global_step,
        "current_epoch": trainer.current_epoch,
    }


# -- automatic optimization with accumulation and clipping --------------------------------------------------
class Regressor(LightningModule):
    def __init__(self, lr: float = 0.1, hidden: int = 8):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, self.hparams.hidden), nn.Tanh(), nn.Linear(self.hparams.hidden, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y))

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}


def run_automatic(root: str) -> dict:
    torch.manual_seed(0)
    module = Regressor()
    trainer = Trainer(
        max_epochs=3,
        accumulate_grad_batches=2,
        gradient_clip_val=0.5,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=root,
        **QUIET,
    )
    trainer.fit(module, DataLoader(regression(64, 1), batch_size=8), DataLoader(regression(32, 2), batch_size=16))
    return summary(trainer, module)


# -- manual optimization: a small GAN with two optimizers ---------------------------------------------------
class GAN(LightningModule):
    def __init__(self, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 2))
        self.discriminator = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))

    def training_step(self, batch, batch_idx):
        real, noise = batch
        opt_g, opt_d = self.optimizers()
        sched_g, sched_d = self.lr_schedulers()
        ones = torch.ones(real.shape[0], 1)
        zeros = torch.zeros(real.shape[0], 1)

        self.toggle_optimizer(opt_d)
        fake = self.generator(noise)
        d_loss = F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
        d_loss = d_loss + F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros)
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        self.clip_gradients(opt_d, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
        opt_d.step()
        self.untoggle_optimizer(opt_d)

        self.toggle_optimizer(opt_g)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(self.generator(noise)), ones)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)

        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, prog_bar=True, on_step=True, on_epoch=True)
        if self.trainer.is_last_batch:
            sched_g.step()
            sched_d.step(self.trainer.callback_metrics["d_loss"])

    def configure_optimizers(self):
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr)
        opt_d = torch.optim.SGD(self.discriminator.parameters(), lr=self.hparams.lr, momentum=0.5)
        return [opt_g, opt_d], [
            torch.optim.lr_scheduler.StepLR(opt_g, step_size=1, gamma=0.5),
            torch.optim.lr_scheduler.ReduceLROnPlateau(opt_d, patience=0),
        ]


def gan_data() -> TensorDataset:
    generator = torch.Generator().manual_seed(5)
    real = torch.randn(48, 2, generator=generator) * 0.5 + 2.0
    return TensorDataset(real, torch.randn(48, 2, generator=generator))


def run_gan(root: str) -> dict:
    torch.manual_seed(1)
    module = GAN()
    trainer = Trainer(max_epochs=2, logger=False, enable_checkpointing=False, default_root_dir=root, **QUIET)
    trainer.fit(module, DataLoader(gan_data(), batch_size=8))
    result = summary(trainer, module)
    result["lrs"] = [group["lr"] for opt in trainer.optimizers for group in opt.param_groups]
    return result


# -- a DataModule --------------------------------------------------------------------------------------------
class RegressionData(LightningDataModule):
    def __init__(self, batch_size: int = 8):
        super().__init__()
        self.save_hyperparameters()
        self.stages = []

    def prepare_data(self):
        self.stages.append("prepare_data")

    def setup(self, stage):
        self.stages.append(("setup", stage == "fit", stage == "test"))
        data = regression(80, 3)
        self.train_set = TensorDataset(*(t[:48] for t in data.tensors))
        self.val_set = TensorDataset(*(t[48:64] for t in data.tensors))
        self.test_set = TensorDataset(*(t[64:] for t in data.tensors))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=8)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=8)

    def teardown(self, stage):
        self.stages.append(("teardown", stage == "fit", stage == "test"))


def run_datamodule(root: str) -> dict:
    torch.manual_seed(2)
    module = Regressor(lr=0.05, hidden=6)
    data = RegressionData(batch_size=12)
    trainer = Trainer(max_epochs=2, logger=False, enable_checkpointing=False, default_root_dir=root, **QUIET)
    trainer.fit(module, datamodule=data)
    result = summary(trainer, module)
    result["test"] = trainer.test(module, datamodule=data, verbose=False)
    result["test_callback_metrics"] = sorted(trainer.callback_metrics)
    result["stages"] = data.stages
    result["datamodule_is_attached"] = trainer.datamodule is data
    return result


# -- the module's own loaders: two train loaders combined, two val loaders ----------------------------------
class OwnLoaders(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.seen = []

    def train_dataloader(self):
        return {
            "long": DataLoader(regression(40, 6), batch_size=8),
            "short": DataLoader(regression(16, 7), batch_size=8),
        }

    def val_dataloader(self):
        return [DataLoader(regression(16, 8), batch_size=8), DataLoader(regression(8, 9), batch_size=8)]

    def training_step(self, batch, batch_idx):
        (x1, y1), (x2, y2) = batch["long"], batch["short"]
        self.seen.append((batch_idx, round(float(x2[0, 0]), 5)))
        loss = F.mse_loss(self.net(x1), y1) + F.mse_loss(self.net(x2), y2)
        self.log("loss", loss)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def run_own_loaders(root: str) -> dict:
    torch.manual_seed(3)
    module = OwnLoaders()
    trainer = Trainer(max_epochs=2, logger=False, enable_checkpointing=False, default_root_dir=root, **QUIET)
    trainer.fit(module)
    result = summary(trainer, module)
    result["seen"] = module.seen
    return result


# -- fit called with gradients off (a caller's torch.no_grad left on, e.g. by an abandoned generator) --------
def run_grad_off(root: str) -> dict:
    torch.manual_seed(0)
    module = Regressor()
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, default_root_dir=root, **QUIET)
    torch.set_grad_enabled(False)
    try:
        trainer.fit(module, DataLoader(regression(32, 0), batch_size=8))
        result = summary(trainer, module)
        result["grad_enabled_after_fit"] = torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
    return result


# -- ckpt_path="last": a crash in the middle of an epoch, then a resumed run --------------------------------
class Crash(RuntimeError):
    pass


class CrashAt(Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise Crash(f"crash at step {self.step}")


def _resumable_fit(root: str, crash_at=None, ckpt_path=None):
    from torchdata.stateful_dataloader import StatefulDataLoader

    torch.manual_seed(4)
    module = Regressor(lr=0.05)
    callbacks = [ModelCheckpoint(dirpath=f"{root}/ckpt", save_last=True, save_top_k=0, every_n_train_steps=3)]
    if crash_at is not None:
        callbacks.append(CrashAt(crash_at))
    trainer = Trainer(
        max_epochs=3, logger=False, callbacks=callbacks, default_root_dir=root, num_sanity_val_steps=0, **QUIET
    )
    trainer.fit(
        module,
        StatefulDataLoader(regression(64, 10), batch_size=8),
        DataLoader(regression(16, 11), batch_size=8),
        ckpt_path=ckpt_path,
    )
    return trainer, module


def run_resume(root: str) -> dict:
    trainer, module = _resumable_fit(f"{root}/full")
    full = summary(trainer, module)
    try:
        _resumable_fit(f"{root}/cut", crash_at=13)  # epoch 1, batch 5; the last checkpoint is at step 12
    except Crash:
        pass
    trainer, module = _resumable_fit(f"{root}/cut", ckpt_path="last")
    resumed = summary(trainer, module)
    return {"full": full, "resumed": resumed}


# -- ddp_spawn with two processes -----------------------------------------------------------------------------
def run_ddp_spawn(root: str) -> dict:
    torch.manual_seed(5)
    module = Regressor(lr=0.05)
    trainer = Trainer(
        strategy="ddp_spawn",
        devices=2,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        default_root_dir=root,
        **QUIET,
    )
    trainer.fit(module, DataLoader(regression(64, 12), batch_size=8), DataLoader(regression(32, 13), batch_size=8))
    return summary(trainer, module)


# -- the CSV logger's rows --------------------------------------------------------------------------------------
def run_csv(root: str) -> dict:
    torch.manual_seed(6)
    module = Regressor()
    logger = CSVLogger(root, name="csv", version=0)
    trainer = Trainer(max_epochs=2, logger=logger, log_every_n_steps=3, enable_checkpointing=False, **QUIET)
    trainer.fit(module, DataLoader(regression(64, 14), batch_size=8), DataLoader(regression(16, 15), batch_size=8))
    import csv

    with open(f"{root}/csv/version_0/metrics.csv") as handle:
        rows = [{k: v for k, v in row.items() if v != ""} for row in csv.DictReader(handle)]
    return {"rows": rows}


# -- every hook, in order -------------------------------------------------------------------------------------
CALLS = []
MODULE_HOOKS = [
    "setup",
    "teardown",
    "prepare_data",
    "configure_model",
    "configure_callbacks",
    "on_fit_start",
    "on_fit_end",
    "on_train_start",
    "on_train_end",
    "on_train_epoch_start",
    "on_train_epoch_end",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_validation_start",
    "on_validation_end",
    "on_validation_epoch_start",
    "on_validation_epoch_end",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_validation_model_eval",
    "on_validation_model_train",
    "on_validation_model_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "optimizer_zero_grad",
    "optimizer_step",
    "configure_gradient_clipping",
    "on_before_batch_transfer",
    "transfer_batch_to_device",
    "on_after_batch_transfer",
    "on_test_start",
    "on_test_end",
    "on_test_epoch_start",
    "on_test_epoch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_test_model_eval",
    "on_test_model_train",
    "on_predict_start",
    "on_predict_end",
    "on_predict_epoch_start",
    "on_predict_epoch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
    "on_predict_model_eval",
    "on_save_checkpoint",
    "on_load_checkpoint",
]
CALLBACK_HOOKS = [
    "setup",
    "teardown",
    "on_fit_start",
    "on_fit_end",
    "on_sanity_check_start",
    "on_sanity_check_end",
    "on_train_start",
    "on_train_end",
    "on_train_epoch_start",
    "on_train_epoch_end",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_validation_start",
    "on_validation_end",
    "on_validation_epoch_start",
    "on_validation_epoch_end",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_test_start",
    "on_test_end",
    "on_test_epoch_start",
    "on_test_epoch_end",
    "on_test_batch_start",
    "on_test_batch_end",
    "on_predict_start",
    "on_predict_end",
    "on_predict_epoch_start",
    "on_predict_epoch_end",
    "on_predict_batch_start",
    "on_predict_batch_end",
    "on_save_checkpoint",
    "on_load_checkpoint",
]


def _recording(name, base, prefix):
    original = getattr(base, name)

    def hook(self, *args, **kwargs):
        CALLS.append(prefix + name)
        return original(self, *args, **kwargs)

    return hook


class HookedModule(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        CALLS.append("training_step")
        x, y = batch
        return F.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        CALLS.append("validation_step")

    def test_step(self, batch, batch_idx):
        CALLS.append("test_step")

    def predict_step(self, batch, batch_idx):
        CALLS.append("predict_step")
        return self.layer(batch[0])

    def configure_optimizers(self):
        CALLS.append("configure_optimizers")
        return torch.optim.SGD(self.parameters(), lr=0.1)


class HookedCallback(Callback):
    pass


for _name in MODULE_HOOKS:
    setattr(HookedModule, _name, _recording(_name, LightningModule, ""))
for _name in CALLBACK_HOOKS:
    setattr(HookedCallback, _name, _recording(_name, Callback, "cb."))


def run_hooks(root: str) -> dict:
    CALLS.clear()
    torch.manual_seed(7)
    module = HookedModule()
    trainer = Trainer(
        max_epochs=1,
        limit_val_batches=1,
        num_sanity_val_steps=1,
        accumulate_grad_batches=2,
        callbacks=[HookedCallback()],
        logger=False,
        enable_checkpointing=False,
        default_root_dir=root,
        **QUIET,
    )
    data = DataLoader(regression(16, 16), batch_size=4)
    trainer.fit(module, data, data)
    CALLS.append("-- test")
    trainer.test(module, data, verbose=False)
    CALLS.append("-- predict")
    trainer.predict(module, data)
    return {"calls": list(CALLS)}


CASES = {
    "automatic": run_automatic,
    "gan": run_gan,
    "datamodule": run_datamodule,
    "own_loaders": run_own_loaders,
    "grad_off": run_grad_off,
    "resume": run_resume,
    "csv": run_csv,
    "hooks": run_hooks,
    "ddp_spawn": run_ddp_spawn,
}
