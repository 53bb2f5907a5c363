"""Draw the synthetic scenes: a textured, panning background with the task's objects on top.

World coordinates are image-plane fractions ``(u, v)`` in ``[0, 1]^2``. Each view projects
them differently, so together the cameras show where the end effector, the object and the
place target are, and whether the gripper is closed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

VIEWS = ("front", "wrist", "side", "overhead")
_EDGE = 2.0  # soft edge of drawn shapes, pixels
_OBJECT = np.array([230, 200, 40], dtype=np.uint8)
_PLACE = np.array([40, 200, 60], dtype=np.uint8)
_EFFECTOR = np.array([40, 80, 230], dtype=np.uint8)
_GRIPPER = np.array([240, 240, 240], dtype=np.uint8)


@dataclass(frozen=True)
class SceneState:
    """What a frame shows at one instant (world coordinates, gripper closure in [0, 1])."""

    time_s: float
    effector: tuple[float, float]
    obj: tuple[float, float]
    place: tuple[float, float]
    gripper: float
    held: bool


class Renderer:
    """Renders one episode's views; deterministic given its generator.

    :param width: frame width in pixels (even).
    :param height: frame height in pixels (even).
    :param noise_sigma: sensor noise standard deviation, in 8-bit levels.
    """

    def __init__(
        self, rng: np.random.Generator, width: int, height: int, noise_sigma: float = 2.0
    ) -> None:
        self.width, self.height = width, height
        self._textures = [_texture(rng, 2 * height, 2 * width) for _ in VIEWS]
        self._phase = rng.uniform(0, 2 * np.pi, size=(len(VIEWS), 2))
        # Sensor noise, mostly in luminance (as after demosaicing and denoising).
        luma = rng.normal(0.0, noise_sigma, size=(7, height, width, 1))
        chroma = rng.normal(0.0, noise_sigma / 4, size=(7, height, width, 3))
        self._noise = np.rint(luma + chroma).astype(np.int16)

    def render(self, view: int, state: SceneState, index: int) -> npt.NDArray[np.uint8]:
        """The frame of view ``view`` (an index into :data:`VIEWS`) for ``state``."""
        frame = self._background(view, state.time_s)
        name = VIEWS[view % len(VIEWS)]
        if name == "wrist":
            self._draw_wrist(frame, state)
        elif name == "side":
            self._draw_side(frame, state)
        else:
            scale = 1.0 if name == "front" else 0.8
            self._draw_plane(frame, state, scale)
        noisy = frame.astype(np.int16) + self._noise[index % len(self._noise)]
        out: npt.NDArray[np.uint8] = np.clip(noisy, 0, 255).astype(np.uint8)
        return out

    def _background(self, view: int, time_s: float) -> npt.NDArray[np.uint8]:
        px, py = self._phase[view % len(VIEWS)]
        # A steady drift (about 40 px/s) plus a slow sway: every frame moves.
        ox = int(40 * time_s + (1 + np.sin(0.6 * time_s + px)) * self.width / 4) % self.width
        oy = int(25 * time_s + (1 + np.sin(0.4 * time_s + py)) * self.height / 4) % self.height
        tex = self._textures[view % len(VIEWS)]
        return tex[oy : oy + self.height, ox : ox + self.width].copy()

    def _draw_plane(self, frame: npt.NDArray[np.uint8], state: SceneState, scale: float) -> None:
        def pix(p: tuple[float, float]) -> tuple[float, float]:
            u, v = 0.5 + (p[0] - 0.5) * scale, 0.5 + (p[1] - 0.5) * scale
            return u * self.width, v * self.height

        radius = max(2.0, self.height / 24)
        _ring(frame, *pix(state.place), 2 * radius, radius / 2, _PLACE)
        _box(frame, *pix(state.obj), radius, _OBJECT)
        _disc(frame, *pix(state.effector), radius * (1.6 - 0.6 * state.gripper), _EFFECTOR)

    def _draw_wrist(self, frame: npt.NDArray[np.uint8], state: SceneState) -> None:
        zoom = 2.0 * self.width
        cx, cy = self.width / 2, self.height / 2
        ex, ey = state.effector
        radius = max(2.0, self.height / 16)
        _ring(
            frame,
            cx + (state.place[0] - ex) * zoom,
            cy + (state.place[1] - ey) * zoom,
            2 * radius,
            radius / 2,
            _PLACE,
        )
        _box(
            frame, cx + (state.obj[0] - ex) * zoom, cy + (state.obj[1] - ey) * zoom, radius, _OBJECT
        )
        gap = (1.0 - state.gripper) * radius * 2 + 1
        _box(frame, cx - gap - 1, cy, 1.5, _GRIPPER)
        _box(frame, cx + gap + 1, cy, 1.5, _GRIPPER)

    def _draw_side(self, frame: npt.NDArray[np.uint8], state: SceneState) -> None:
        radius = max(2.0, self.height / 24)
        ground = 0.8 * self.height
        lift = 0.25 * self.height if state.gripper > 0.5 else 0.0
        _box(frame, state.obj[0] * self.width, ground - lift * state.held, radius, _OBJECT)
        _ring(frame, state.place[0] * self.width, ground, 2 * radius, radius / 2, _PLACE)
        _disc(frame, state.effector[0] * self.width, ground - lift - 2 * radius, radius, _EFFECTOR)
        bar = state.gripper * (self.height - 8) / 2
        _box(frame, 4.0, 4 + bar, 2.0, _GRIPPER)


def _texture(rng: np.random.Generator, height: int, width: int) -> npt.NDArray[np.uint8]:
    """A random texture: detailed luminance (blotches and stripes) over smooth colour, as a
    camera's pipeline delivers it, so the codecs spend bits on detail rather than chroma."""
    lum = _smooth(rng.uniform(0, 1, size=(height // 8 + 1, width // 8 + 1, 1)), 8, 3)
    colour = _smooth(rng.uniform(40, 170, size=(height // 32 + 2, width // 32 + 2, 3)), 32, 12)
    lum, colour = lum[:height, :width], colour[:height, :width]
    yy, xx = np.mgrid[0:height, 0:width]
    stripes = 0.5 + 0.5 * np.sin(xx * rng.uniform(0.2, 0.5) + yy * rng.uniform(0.1, 0.3))
    img = colour + 80 * (lum - 0.5) + 30 * stripes[..., None]
    out: npt.NDArray[np.uint8] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def _smooth(coarse: npt.NDArray[np.float64], scale: int, blur: int) -> npt.NDArray[np.float64]:
    """Upsample ``coarse`` by ``scale`` and box-blur it ``blur`` pixels, four passes."""
    tex = np.repeat(np.repeat(coarse, scale, axis=0), scale, axis=1)
    for axis in (0, 1, 0, 1):
        tex = (tex + np.roll(tex, blur, axis=axis) + np.roll(tex, -blur, axis=axis)) / 3
    return tex


def _bounds(
    frame: npt.NDArray[np.uint8], x: float, y: float, r: float
) -> tuple[int, int, int, int]:
    h, w = frame.shape[:2]
    r += _EDGE
    return max(0, int(y - r)), min(h, int(y + r) + 2), max(0, int(x - r)), min(w, int(x + r) + 2)


def _blend(
    frame: npt.NDArray[np.uint8],
    x: float,
    y: float,
    r: float,
    color: npt.NDArray[np.uint8],
    inside: Callable[[npt.NDArray[np.float64], npt.NDArray[np.float64]], npt.NDArray[np.float64]],
) -> None:
    """Blend ``color`` where ``inside(dx, dy)`` (signed pixels inside the shape's edge) > 0,
    with a soft edge of :data:`_EDGE` pixels, as optics would blur it."""
    y0, y1, x0, x1 = _bounds(frame, x, y, r)
    if y0 >= y1 or x0 >= x1:
        return
    yy, xx = np.ogrid[y0:y1, x0:x1]
    alpha = np.clip(inside(xx - x, yy - y) / _EDGE + 0.5, 0.0, 1.0)[..., None]
    patch = frame[y0:y1, x0:x1]
    patch[:] = np.rint(patch * (1 - alpha) + color * alpha).astype(np.uint8)


def _disc(
    frame: npt.NDArray[np.uint8], x: float, y: float, r: float, color: npt.NDArray[np.uint8]
) -> None:
    _blend(frame, x, y, r, color, lambda dx, dy: r - np.sqrt(dx * dx + dy * dy))


def _ring(
    frame: npt.NDArray[np.uint8],
    x: float,
    y: float,
    r: float,
    width: float,
    color: npt.NDArray[np.uint8],
) -> None:
    mid = r - width / 2
    _blend(
        frame, x, y, r, color, lambda dx, dy: width / 2 - np.abs(np.sqrt(dx * dx + dy * dy) - mid)
    )


def _box(
    frame: npt.NDArray[np.uint8], x: float, y: float, r: float, color: npt.NDArray[np.uint8]
) -> None:
    _blend(frame, x, y, r, color, lambda dx, dy: r - np.maximum(np.abs(dx), np.abs(dy)))
