"""The models of tinyddp's benchmarks, in PyTorch (imported by the torch_*.py scripts here)."""
import torch.nn as nn


class ToyModel(nn.Module):
    """PyTorch's DDP tutorial's model: net1 = Linear(10, 10), ReLU, net2 = Linear(10, 5)."""

    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def mlp(widths):
    """Linear layers between consecutive widths, ReLU between them (tinyddp's nn::mlp)."""
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def digits_cnn(dropout=0.25):
    """examples/train's --model cnn (tinyddp's examples::digits_cnn), for [N, 1, 8, 8] images."""
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Dropout(dropout), nn.Linear(128, 10))
