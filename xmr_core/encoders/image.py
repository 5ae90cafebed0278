"""Image encoders: every one returns `Features(local, mask, global_)`.

- `SmallCNN`: four conv-BN-ReLU-maxpool blocks for the 64×64 scenes images; the global feature flattens
  the last 4×4 grid (so object position survives, unlike global average pooling) through an MLP.
- `ResNetEncoder`: a torchvision ResNet cut before global average pooling (PCME Sec. 3.1.1: z_v is the
  h×w×d_v map before GAP), global feature = GAP + linear. `weights=None` by default; ImageNet weights
  are loaded only from a file the user already has (never downloaded here).
- `RegionProjector`: precomputed region features (B, R, D_in) + mask (BUTD-style input), projected per
  region; global feature = masked mean of the projected regions.
- `GridHead`: precomputed grid features (B, L, C) of a frozen pretrained trunk (`xmr_core.encoders.trunk`,
  the default on scenes): local = the grid cells as they are, global = the same MLP (or GAP + linear) that
  `SmallCNN` (or `ResNetEncoder`) puts on its own grid. So "frozen trunk" (kind "grid") and "fine-tune the
  trunk" (kind "cnn" initialised from the same trunk) train the same head.

`local` is a sequence of local features (B, L, C) (a grid is flattened row-major to L = h·w), `mask` a
bool (B, L) with True on real entries, `global_` the (B, D) global feature.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

import torch
import torchvision
from torch import Tensor, nn

from xmr_core.encoders.trunk_cache import load_trunk_state


class Features(NamedTuple):
    """Local + global features of a batch. local (B, L, C), mask (B, L) bool (True = real), global_ (B, D)."""

    local: Tensor
    mask: Tensor
    global_: Tensor


def grid_to_sequence(grid: Tensor) -> Tensor:
    """(B, C, h, w) -> (B, h·w, C), row-major."""
    return grid.flatten(2).transpose(1, 2)


def conv_trunk(widths: tuple[int, ...]) -> nn.Sequential:
    """The scenes trunk: conv-BN-ReLU-maxpool blocks, (B, 3, H, W) -> grid (B, widths[-1], H/2^n, W/2^n)."""
    blocks: list[nn.Module] = []
    c_in = 3
    for c_out in widths:
        blocks += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
        blocks.append(nn.MaxPool2d(2))
        c_in = c_out
    return nn.Sequential(*blocks)


def grid_side(image_size: int, widths: tuple[int, ...]) -> int:
    """Side of the trunk's output grid for a square image."""
    side = image_size // 2 ** len(widths)
    if side < 1:
        raise ValueError(f"image_size {image_size} is too small for {len(widths)} pooling blocks")
    return side


class GridHead(nn.Module):
    """Grid features (B, L, C) -> global (B, embed_dim): `flatten` = MLP over all L·C values (keeps where
    things are; the scenes trunk) or `mean` = linear(GAP) (ResNet, PCME's h_V global branch)."""

    def __init__(self, channels: int, cells: int, embed_dim: int, hidden: int = 512,
                 pool: Literal["flatten", "mean"] = "flatten") -> None:
        super().__init__()
        if pool not in ("flatten", "mean"):
            raise ValueError(f"unknown grid pooling {pool!r}; choose 'flatten' or 'mean'")
        self.pool = pool
        if pool == "flatten":
            self.mlp = nn.Sequential(nn.Flatten(), nn.Linear(channels * cells, hidden), nn.ReLU(inplace=True),
                                     nn.Linear(hidden, embed_dim))
        else:
            self.mlp = nn.Linear(channels, embed_dim)

    def forward(self, local: Tensor) -> Tensor:
        return self.mlp(local if self.pool == "flatten" else local.mean(1))


class SmallCNN(nn.Module):
    """`conv_trunk` + `GridHead`; forward (B, 3, H, W) -> (grid (B, C, h, w), global (B, embed_dim))."""

    def __init__(
        self, embed_dim: int, widths: tuple[int, ...] = (16, 32, 64, 128), hidden: int = 512, image_size: int = 64
    ) -> None:
        super().__init__()
        self.features = conv_trunk(widths)
        self.grid_side = grid_side(image_size, widths)
        self.out_channels = widths[-1]
        self.head = GridHead(self.out_channels, self.grid_side**2, embed_dim, hidden)

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        grid = self.features(images)
        return grid, self.head(grid_to_sequence(grid))


ResNetArch = Literal["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]

_RESNET_WEIGHTS = {
    "resnet18": "ResNet18_Weights",
    "resnet34": "ResNet34_Weights",
    "resnet50": "ResNet50_Weights",
    "resnet101": "ResNet101_Weights",
    "resnet152": "ResNet152_Weights",
}
RESNET_ARCHS: tuple[str, ...] = tuple(_RESNET_WEIGHTS)


def imagenet_weights_path(arch: str) -> Path:
    """Where torchvision's cache keeps the ImageNet (IMAGENET1K_V1) weights of `arch`."""
    weights = getattr(torchvision.models, _RESNET_WEIGHTS[arch]).IMAGENET1K_V1
    return Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name


def load_pretrained_state(arch: str, pretrained: bool | str) -> dict[str, Tensor]:
    """ImageNet weights from `pretrained` (a path) or torchvision's cache (`True`); never downloads. A missing
    file is named with the notebook parameter that sets another (`IMAGE_WEIGHTS`)."""
    path = imagenet_weights_path(arch) if pretrained is True else Path(str(pretrained))
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no ImageNet weights for {arch}; put torchvision's {imagenet_weights_path(arch).name} at "
            f"{imagenet_weights_path(arch)}, or set the notebook parameter IMAGE_WEIGHTS to a state-dict file of "
            f"{arch} (-p IMAGE_WEIGHTS \"'<path>'\"), or to 'none' for no ImageNet weights"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a bad file
        raise RuntimeError(f"{path}: not a readable ResNet state dict ({type(err).__name__}: {err})") from None


def zero_residual_scales(net: nn.Module) -> None:
    """Zero the scale of the last batch norm of every residual branch (torchvision's `zero_init_residual`), so each
    block of an untrained ResNet starts as its shortcut: at its plain initialisation a ResNet-152's grid features
    reach ~1e8 on an image and the heads above them overflow to NaN; with the branches zeroed they stay O(1)."""
    for block in net.modules():
        last = getattr(block, "bn3", None) if hasattr(block, "conv3") else getattr(block, "bn2", None)
        if hasattr(block, "downsample") and isinstance(last, nn.BatchNorm2d):
            nn.init.zeros_(last.weight)


class ResNetEncoder(nn.Module):
    """torchvision ResNet without GAP/fc; forward -> (grid (B, C, h, w), global (B, embed_dim) = linear(GAP)).
    Without ImageNet weights (`pretrained` False) its residual branches start zero-scaled (`zero_residual_scales`):
    the trunk without weights (`trunk.imagenet_trunk`) and the encoder fine-tuned from it start alike, and finite."""

    def __init__(self, embed_dim: int, arch: ResNetArch = "resnet152", pretrained: bool | str = False) -> None:
        super().__init__()
        if arch not in _RESNET_WEIGHTS:
            raise ValueError(f"unknown ResNet {arch!r}; choose one of {sorted(_RESNET_WEIGHTS)}")
        net = getattr(torchvision.models, arch)(weights=None)
        if pretrained:
            net.load_state_dict(load_pretrained_state(arch, pretrained))
        else:
            zero_residual_scales(net)
        self.out_channels = net.fc.in_features
        self.backbone = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool, net.layer1, net.layer2,
                                      net.layer3, net.layer4)
        self.fc = nn.Linear(self.out_channels, embed_dim)

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        grid = self.backbone(images)
        return grid, self.fc(grid.mean(dim=(2, 3)))


class RegionProjector(nn.Module):
    """Precomputed regions (B, R, D_in) + mask (B, R) -> (local (B, R, D), global (B, D) masked mean)."""

    def __init__(self, in_dim: int, embed_dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_dim, embed_dim)
        self.out_channels = embed_dim

    def forward(self, regions: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        local = self.fc(regions)
        weights = mask.to(local.dtype).unsqueeze(-1)
        count = weights.sum(1).clamp_min(1.0)
        return local, (local * weights).sum(1) / count


VISUAL_INPUT = {"cnn": "pixels", "resnet": "pixels", "regions": "regions", "grid": "grid"}


@dataclass
class ImageEncoderConfig:
    """Which image encoder: `kind` "grid" (precomputed features of a frozen trunk), "cnn" (scenes pixels),
    "resnet" (pixels) or "regions" (precomputed region features).

    trunk: key of the pretrained scenes trunk (`xmr_core.encoders.trunk`): kind "cnn" starts from its weights
    (fine-tuning), kind "grid" records which trunk made the features (so a run's key changes with it).
    grid_dim / grid_cells / grid_pool: the grid features' channels C, cells L and global pooling.
    """

    kind: Literal["grid", "cnn", "resnet", "regions"] = "cnn"
    widths: tuple[int, ...] = (16, 32, 64, 128)
    hidden: int = 512
    image_size: int = 64
    arch: ResNetArch = "resnet152"
    pretrained: bool | str = False
    region_dim: int = 0
    trunk: str = ""
    grid_dim: int = 0
    grid_cells: int = 0
    grid_pool: Literal["flatten", "mean"] = "flatten"


class ImageEncoder(nn.Module):
    """Batch dict -> `Features`. Reads `batch["images"]` (B, 3, H, W), or `batch["regions"]` + `region_mask`."""

    def __init__(self, config: ImageEncoderConfig, embed_dim: int) -> None:
        super().__init__()
        self.config = config
        if config.kind == "cnn":
            self.net: nn.Module = SmallCNN(embed_dim, tuple(config.widths), config.hidden, config.image_size)
            if config.trunk:
                self.net.features.load_state_dict(load_trunk_state(config.trunk))
        elif config.kind == "grid":
            if config.grid_dim <= 0 or config.grid_cells <= 0:
                raise ValueError("ImageEncoderConfig(kind='grid') needs grid_dim > 0 and grid_cells > 0")
            self.net = GridHead(config.grid_dim, config.grid_cells, embed_dim, config.hidden, config.grid_pool)
            self.net.out_channels = config.grid_dim
        elif config.kind == "resnet":
            self.net = ResNetEncoder(embed_dim, config.arch, config.pretrained)
        elif config.kind == "regions":
            if config.region_dim <= 0:
                raise ValueError("ImageEncoderConfig(kind='regions') needs region_dim > 0")
            self.net = RegionProjector(config.region_dim, embed_dim)
        else:
            raise ValueError(f"unknown image encoder kind {config.kind!r}")
        self.local_dim: int = self.net.out_channels
        self.visual: str = VISUAL_INPUT[config.kind]  # the batch input it reads (`datasets.Visual`)

    def backbone_parameters(self) -> list[nn.Parameter]:
        """Parameters frozen in PCME's first phase: the pretrained trunk (none for the projector)."""
        if isinstance(self.net, ResNetEncoder):
            return list(self.net.backbone.parameters())
        if isinstance(self.net, SmallCNN):
            return list(self.net.features.parameters())
        return []

    def forward(self, batch: dict[str, Tensor]) -> Features:
        if self.config.kind == "grid":
            if "grid" not in batch:
                raise KeyError("image encoder of kind 'grid' needs batch['grid'] (B, L, C) grid features")
            local = batch["grid"]
            mask = torch.ones(local.shape[:2], dtype=torch.bool, device=local.device)
            return Features(local, mask, self.net(local))
        if self.config.kind == "regions":
            if "regions" not in batch:
                raise KeyError("image encoder of kind 'regions' needs batch['regions'] and batch['region_mask']")
            mask = batch["region_mask"].bool()
            local, global_ = self.net(batch["regions"], mask)
            return Features(local, mask, global_)
        if "images" not in batch:
            raise KeyError(f"image encoder of kind {self.config.kind!r} needs batch['images'] (B, 3, H, W)")
        grid, global_ = self.net(batch["images"])
        local = grid_to_sequence(grid)
        mask = torch.ones(local.shape[:2], dtype=torch.bool, device=local.device)
        return Features(local, mask, global_)
