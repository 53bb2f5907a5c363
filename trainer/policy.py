"""A small visuomotor policy: camera frames and a state window in, an action chunk out.

Each camera has its own CNN encoder (stride-2 convolutions, then a spatial softmax that turns
every feature map into the expected image position of its activation, so object positions
survive pooling); the state window goes through an MLP; an MLP head maps the concatenated
embeddings to ``action_horizon x action_dim`` actions. Inputs are the loader's batch tensors;
state and actions arrive normalized by the manifest's statistics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .config import ModelSection

Batch = dict[str, Any]


@dataclass(frozen=True)
class PolicyShape:
    """Tensor shapes the policy is built for.

    :param cameras: camera names, in a fixed (sorted) order.
    :param frames_per_camera: frames per camera per sample.
    :param state_history: state steps per sample; :param state_dim: state dimensions.
    :param action_horizon: action steps predicted; :param action_dim: action dimensions.
    """

    cameras: tuple[str, ...]
    frames_per_camera: int
    state_history: int
    state_dim: int
    action_horizon: int
    action_dim: int

    @classmethod
    def from_batch(cls, batch: Batch) -> PolicyShape:
        """Read the shapes off a loader batch."""
        frames: Mapping[str, Tensor] = batch["frames"]
        cameras = tuple(sorted(frames))
        _, history, state_dim = batch["state"].shape
        _, horizon, action_dim = batch["actions"].shape
        first = frames[cameras[0]] if cameras else None
        return cls(
            cameras=cameras,
            frames_per_camera=int(first.shape[1]) if first is not None else 0,
            state_history=int(history),
            state_dim=int(state_dim),
            action_horizon=int(horizon),
            action_dim=int(action_dim),
        )


class SpatialSoftmax(nn.Module):
    """Feature maps [B, C, H, W] -> expected (x, y) of each channel, [B, 2C], in [-1, 1]."""

    def forward(self, x: Tensor) -> Tensor:
        batch, channels, height, width = x.shape
        weights = torch.softmax(x.reshape(batch, channels, height * width), dim=-1)
        ys = torch.linspace(-1.0, 1.0, height, device=x.device, dtype=x.dtype)
        xs = torch.linspace(-1.0, 1.0, width, device=x.device, dtype=x.dtype)
        grid_y = ys.repeat_interleave(width)
        grid_x = xs.repeat(height)
        expected_x = (weights * grid_x).sum(-1)
        expected_y = (weights * grid_y).sum(-1)
        return torch.cat([expected_x, expected_y], dim=-1)


class CameraEncoder(nn.Module):
    """uint8 frames [B, F, H, W, 3] and validity [B, F] -> an embedding [B, E]."""

    def __init__(self, frames: int, channels: tuple[int, ...], embed_dim: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = 3 * frames
        for index, out_channels in enumerate(channels):
            kernel = 5 if index == 0 else 3
            layers += [
                nn.Conv2d(in_channels, out_channels, kernel, stride=2, padding=kernel // 2),
                nn.GroupNorm(1, out_channels),
                nn.ReLU(),
            ]
            in_channels = out_channels
        self.conv = nn.Sequential(*layers)
        self.pool = SpatialSoftmax()
        self.proj = nn.Sequential(nn.Linear(2 * in_channels, embed_dim), nn.ReLU())

    def forward(self, frames: Tensor, valid: Tensor) -> Tensor:
        batch, count, height, width, _ = frames.shape
        x = frames.to(torch.float32) / 255.0
        x = x * valid.to(x.dtype).reshape(batch, count, 1, 1, 1)
        x = x.permute(0, 1, 4, 2, 3).reshape(batch, count * 3, height, width)
        out: Tensor = self.proj(self.pool(self.conv(x)))
        return out


def _mlp(in_dim: int, hidden: int, layers: int, out_dim: int) -> nn.Sequential:
    modules: list[nn.Module] = []
    width = in_dim
    for _ in range(layers):
        modules += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    modules.append(nn.Linear(width, out_dim))
    return nn.Sequential(*modules)


class Policy(nn.Module):
    """Predicts an action chunk [B, Ha, Da] from a batch (see the module docstring)."""

    def __init__(self, shape: PolicyShape, config: ModelSection) -> None:
        super().__init__()
        self.shape = shape
        # One encoder per camera, in the order of shape.cameras (names may hold "/" or ".").
        self.encoders = nn.ModuleList(
            CameraEncoder(shape.frames_per_camera, config.channels, config.embed_dim)
            for _ in shape.cameras
        )
        state_in = shape.state_history * (shape.state_dim + 1)
        self.state_encoder = _mlp(state_in, config.embed_dim, 1, config.embed_dim)
        head_in = config.embed_dim * (len(shape.cameras) + 1)
        head_out = shape.action_horizon * shape.action_dim
        self.head = _mlp(head_in, config.hidden_dim, config.head_layers, head_out)

    def forward(
        self,
        frames: Mapping[str, Tensor],
        frame_valid: Mapping[str, Tensor],
        state: Tensor,
        state_valid: Tensor,
    ) -> Tensor:
        valid = state_valid.to(state.dtype).unsqueeze(-1)
        state_in = torch.cat([state * valid, valid], dim=-1).flatten(1)
        parts = [
            encoder(frames[camera], frame_valid[camera])
            for camera, encoder in zip(self.shape.cameras, self.encoders, strict=True)
        ]
        parts.append(self.state_encoder(state_in))
        out: Tensor = self.head(torch.cat(parts, dim=-1))
        return out.reshape(-1, self.shape.action_horizon, self.shape.action_dim)


def action_loss(predicted: Tensor, target: Tensor, valid: Tensor) -> Tensor:
    """Mean squared error over the valid action steps (``valid`` [B, Ha] masks padding)."""
    weight = valid.to(predicted.dtype).unsqueeze(-1).expand_as(predicted)
    squared = (predicted - target).square() * weight
    return squared.sum() / weight.sum().clamp_min(1.0)


def batch_loss(model: nn.Module, batch: Batch, device: torch.device) -> Tensor:
    """Move a loader batch to ``device``, run ``model`` and return the masked action loss."""
    frames = {k: v.to(device, non_blocking=True) for k, v in batch["frames"].items()}
    frame_valid = {k: v.to(device, non_blocking=True) for k, v in batch["frame_valid"].items()}
    state = batch["state"].to(device, non_blocking=True)
    state_valid = batch["state_valid"].to(device, non_blocking=True)
    actions = batch["actions"].to(device, non_blocking=True)
    action_valid = batch["action_valid"].to(device, non_blocking=True)
    predicted = model(frames, frame_valid, state, state_valid)
    return action_loss(predicted, actions, action_valid)
