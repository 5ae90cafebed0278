"""Image encoders: every one returns `Features(local, mask, global_)`.

- `SmallCNN`: four conv-BN-ReLU-maxpool blocks for the 64×64 scenes images; the global feature flattens
  the last 4×4 grid (so object position survives, unlike global average pooling) through an MLP.
- `ResNetEncoder`: a torchvision ResNet cut before global average pooling (PCME Sec. 3.1.1: z_v is the
  h×w×d_v map before GAP), global feature = GAP + linear. `weights=None` by default; ImageNet weights
  are loaded only from a file the user already has (never downloaded here).
- `RegionProjector`: precomputed region features (B, R, D_in) + mask (BUTD-style input), projected per
  region; global feature = masked mean of the projected regions.

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


class Features(NamedTuple):
    """Local + global features of a batch. local (B, L, C), mask (B, L) bool (True = real), global_ (B, D)."""

    local: Tensor
    mask: Tensor
    global_: Tensor


def grid_to_sequence(grid: Tensor) -> Tensor:
    """(B, C, h, w) -> (B, h·w, C), row-major."""
    return grid.flatten(2).transpose(1, 2)


class SmallCNN(nn.Module):
    """Conv-BN-ReLU-maxpool blocks; forward (B, 3, H, W) -> (grid (B, C, h, w), global (B, embed_dim))."""

    def __init__(
        self, embed_dim: int, widths: tuple[int, ...] = (16, 32, 64, 128), hidden: int = 512, image_size: int = 64
    ) -> None:
        super().__init__()
        blocks: list[nn.Module] = []
        c_in = 3
        for c_out in widths:
            blocks += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
            blocks.append(nn.MaxPool2d(2))
            c_in = c_out
        self.features = nn.Sequential(*blocks)
        side = image_size // 2 ** len(widths)
        if side < 1:
            raise ValueError(f"image_size {image_size} is too small for {len(widths)} pooling blocks")
        self.out_channels = c_in
        self.grid_side = side
        self.mlp = nn.Sequential(nn.Flatten(), nn.Linear(c_in * side * side, hidden), nn.ReLU(inplace=True),
                                 nn.Linear(hidden, embed_dim))

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        grid = self.features(images)
        return grid, self.mlp(grid)


ResNetArch = Literal["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]

_RESNET_WEIGHTS = {
    "resnet18": "ResNet18_Weights",
    "resnet34": "ResNet34_Weights",
    "resnet50": "ResNet50_Weights",
    "resnet101": "ResNet101_Weights",
    "resnet152": "ResNet152_Weights",
}


def imagenet_weights_path(arch: str) -> Path:
    """Where torchvision's cache keeps the ImageNet (IMAGENET1K_V1) weights of `arch`."""
    weights = getattr(torchvision.models, _RESNET_WEIGHTS[arch]).IMAGENET1K_V1
    return Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name


def load_pretrained_state(arch: str, pretrained: bool | str) -> dict[str, Tensor]:
    """ImageNet weights from `pretrained` (a path) or torchvision's cache (`True`); never downloads."""
    path = imagenet_weights_path(arch) if pretrained is True else Path(str(pretrained))
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no ImageNet weights for {arch}; put torchvision's {path.name} there "
            f"(or pass pretrained=<path to a state dict>), or use pretrained=False"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure is a bad file
        raise RuntimeError(f"{path}: not a readable ResNet state dict ({type(err).__name__}: {err})") from None


class ResNetEncoder(nn.Module):
    """torchvision ResNet without GAP/fc; forward -> (grid (B, C, h, w), global (B, embed_dim) = linear(GAP))."""

    def __init__(self, embed_dim: int, arch: ResNetArch = "resnet152", pretrained: bool | str = False) -> None:
        super().__init__()
        if arch not in _RESNET_WEIGHTS:
            raise ValueError(f"unknown ResNet {arch!r}; choose one of {sorted(_RESNET_WEIGHTS)}")
        net = getattr(torchvision.models, arch)(weights=None)
        if pretrained:
            net.load_state_dict(load_pretrained_state(arch, pretrained))
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


@dataclass
class ImageEncoderConfig:
    """Which image encoder; `kind` "cnn" (scenes pixels), "resnet" (pixels), "regions" (precomputed)."""

    kind: Literal["cnn", "resnet", "regions"] = "cnn"
    widths: tuple[int, ...] = (16, 32, 64, 128)
    hidden: int = 512
    image_size: int = 64
    arch: ResNetArch = "resnet152"
    pretrained: bool | str = False
    region_dim: int = 0


class ImageEncoder(nn.Module):
    """Batch dict -> `Features`. Reads `batch["images"]` (B, 3, H, W), or `batch["regions"]` + `region_mask`."""

    def __init__(self, config: ImageEncoderConfig, embed_dim: int) -> None:
        super().__init__()
        self.config = config
        if config.kind == "cnn":
            self.net: nn.Module = SmallCNN(embed_dim, tuple(config.widths), config.hidden, config.image_size)
        elif config.kind == "resnet":
            self.net = ResNetEncoder(embed_dim, config.arch, config.pretrained)
        elif config.kind == "regions":
            if config.region_dim <= 0:
                raise ValueError("ImageEncoderConfig(kind='regions') needs region_dim > 0")
            self.net = RegionProjector(config.region_dim, embed_dim)
        else:
            raise ValueError(f"unknown image encoder kind {config.kind!r}")
        self.local_dim: int = self.net.out_channels

    def backbone_parameters(self) -> list[nn.Parameter]:
        """Parameters frozen in PCME's first phase: the pretrained trunk (none for the projector)."""
        if isinstance(self.net, ResNetEncoder):
            return list(self.net.backbone.parameters())
        if isinstance(self.net, SmallCNN):
            return list(self.net.features.parameters())
        return []

    def forward(self, batch: dict[str, Tensor]) -> Features:
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
