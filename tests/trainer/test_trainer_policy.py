"""The policy network: shapes, masking, and that it can learn."""

from __future__ import annotations

import torch

from trainer.config import ModelSection
from trainer.policy import Policy, PolicyShape, action_loss, batch_loss

SMALL = ModelSection(channels=(8, 16), embed_dim=16, hidden_dim=32)


def make_batch(size: int = 4, seed: int = 0) -> dict[str, object]:
    generator = torch.Generator().manual_seed(seed)
    frames = {
        cam: torch.randint(0, 256, (size, 2, 24, 32, 3), dtype=torch.uint8, generator=generator)
        for cam in ("wrist", "front")
    }
    return {
        "frames": frames,
        "frame_valid": {cam: torch.ones(size, 2, dtype=torch.bool) for cam in frames},
        "state": torch.randn(size, 4, 7, generator=generator),
        "state_valid": torch.ones(size, 4, dtype=torch.bool),
        "actions": torch.randn(size, 8, 6, generator=generator),
        "action_valid": torch.ones(size, 8, dtype=torch.bool),
        "sample_index": torch.arange(size),
    }


def test_shape_from_batch_and_output_shape() -> None:
    batch = make_batch()
    shape = PolicyShape.from_batch(batch)
    assert shape == PolicyShape(("front", "wrist"), 2, 4, 7, 8, 6)
    policy = Policy(shape, SMALL)
    out = policy(batch["frames"], batch["frame_valid"], batch["state"], batch["state_valid"])
    assert out.shape == (4, 8, 6)


def test_loss_ignores_invalid_action_steps() -> None:
    predicted = torch.zeros(1, 3, 2)
    target = torch.tensor([[[1.0, 1.0], [2.0, 2.0], [100.0, 100.0]]])
    valid = torch.tensor([[True, True, False]])
    assert action_loss(predicted, target, valid).item() == (1 + 1 + 4 + 4) / 4


def test_loss_falls_when_fitting_a_batch() -> None:
    torch.manual_seed(0)
    batch = make_batch(seed=1)
    policy = Policy(PolicyShape.from_batch(batch), SMALL)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=3e-3)
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = batch_loss(policy, batch, torch.device("cpu"))
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
