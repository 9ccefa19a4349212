"""A torchrun-style DDP training script on CPU (gloo), for kdist's compatibility suite.

Written anew after pytorch/examples' distributed/ddp-tutorial-series/multigpu_torchrun.py
(and its multinode.py), with the same structure: it reads only torchrun's variables
(LOCAL_RANK, RANK, WORLD_SIZE via init_process_group's env:// defaults), wraps the model
in DistributedDataParallel, saves a snapshot every `save_every` epochs and, when the
snapshot exists at start, resumes from it. It knows nothing of kdist and does not look at
TORCHELASTIC_RESTART_COUNT: a restart is visible to it only through its own snapshot.

Differences from the original, all for a CPU-only test machine: gloo instead of NCCL, no
.to(device); a seeded synthetic data set (the same on every rank) and an MSE loss; the
snapshot is written by global rank 0 (as in multinode.py) atomically, to --snapshot_path;
--step_delay paces a fault drill. Like the original it prints without flush().
"""

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class MyTrainDataset(Dataset):
    def __init__(self, size):
        gen = torch.Generator().manual_seed(0)
        self.data = [(torch.rand(20, generator=gen), torch.rand(1, generator=gen))
                     for _ in range(size)]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return self.data[index]


def ddp_setup():
    init_process_group(backend="gloo")


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path, step_delay):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = model
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.step_delay = step_delay
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            print("Loading snapshot")
            self._load_snapshot(snapshot_path)
        self.model = DDP(self.model)

    def _load_snapshot(self, snapshot_path):
        snapshot = torch.load(snapshot_path, map_location="cpu")
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[CPU{self.global_rank}] Epoch {epoch} | Batchsize: {b_sz} | "
              f"Steps: {len(self.train_data)}")
        self.train_data.sampler.set_epoch(epoch)
        for source, targets in self.train_data:
            self._run_batch(source, targets)
            if self.step_delay:
                time.sleep(self.step_delay)

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch + 1}
        tmp = f"{self.snapshot_path}.tmp"
        torch.save(snapshot, tmp)
        os.replace(tmp, self.snapshot_path)
        print(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            last = epoch == max_epochs - 1
            if self.global_rank == 0 and (epoch % self.save_every == 0 or last):
                self._save_snapshot(epoch)


def load_train_objs():
    train_set = MyTrainDataset(2048)
    torch.manual_seed(0)
    model = torch.nn.Linear(20, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return train_set, model, optimizer


def prepare_dataloader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, shuffle=False,
                      sampler=DistributedSampler(dataset))


def main(save_every, total_epochs, batch_size, snapshot_path, step_delay):
    ddp_setup()
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path, step_delay)
    trainer.train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument("--batch_size", default=32, type=int,
                        help="Input batch size on each device (default: 32)")
    parser.add_argument("--snapshot_path", default="snapshot.pt", help="default: snapshot.pt")
    parser.add_argument("--step_delay", default=0.0, type=float,
                        help="seconds to sleep after each batch (default 0)")
    args = parser.parse_args()
    main(args.save_every, args.total_epochs, args.batch_size, args.snapshot_path,
         args.step_delay)
