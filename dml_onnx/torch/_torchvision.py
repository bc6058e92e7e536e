"""torchvision's ROI operators on the ``dml_onnx`` kernels, a drop-in switch.

``roi_align``, ``roi_pool``, ``RoIAlign``, ``RoIPool`` and ``MultiScaleRoIAlign`` take
torchvision's arguments with its defaults: ``input [N, C, H, W]``, boxes as ``Tensor[K, 5]``
(rows ``[batch, x1, y1, x2, y2]``, the batch index a float as torchvision takes it, truncated)
or a list of ``Tensor[L, 4]`` (one per image); ``output_size`` an int or ``(height, width)``.
They compute with DirectML's rules (RoiAlign1 and RoiPooling), where torchvision's differ
(``docs/converting.md`` says where); bad box shapes raise torchvision's ``AssertionError``,
bad values a :class:`~dml_onnx.KernelError` (a ``RuntimeError``, as torchvision's
kernels raise). All are scriptable and run under ``torch.compile``; quantized inputs are not
taken (the kernels compute in floating point).
"""

import torch
from torch import Tensor, nn
from torch.jit.annotations import BroadcastingList2
from torch.nn.modules.utils import _pair

from dml_onnx.torch import _ops  # noqa: F401 - registers torch.ops.dml_onnx


def _check_boxes(boxes: Tensor | list[Tensor]) -> None:
    """torchvision's box-shape rule: ``Tensor[K, 5]`` or a list of ``Tensor[L, 4]``."""
    if isinstance(boxes, (list, tuple)):
        for tensor in boxes:
            torch._assert(tensor.size(1) == 4, "The shape of the tensor in the boxes list is "
                                               "not correct as List[Tensor[L, 4]]")
    elif isinstance(boxes, Tensor):
        torch._assert(boxes.size(1) == 5, "The boxes tensor shape is not correct as "
                                          "Tensor[K, 5]")
    else:
        torch._assert(False, "boxes is expected to be a Tensor[L, 5] or a List[Tensor[K, 4]]")


def _roi_rows(boxes: list[Tensor]) -> Tensor:
    """One ``[K, 5]`` tensor from per-image ``[L, 4]`` boxes: the image index first."""
    ids = [torch.full_like(b[:, :1], i) for i, b in enumerate(boxes)]
    return torch.cat([torch.cat(ids, dim=0), torch.cat(boxes, dim=0)], dim=1)


def _rois(boxes: Tensor | list[Tensor]) -> Tensor:
    _check_boxes(boxes)
    if isinstance(boxes, Tensor):
        return boxes
    return _roi_rows(boxes)


@torch.fx.wrap  # a leaf of torch.fx traces, as torchvision's is
def roi_align(input: Tensor, boxes: Tensor | list[Tensor],
              output_size: BroadcastingList2[int], spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: bool = False) -> Tensor:
    """torchvision's ``roi_align`` as ``RoiAlign1`` -> ``[K, C, output_size]``.

    ``aligned=True``: the pixel offsets 0.5 and -0.5; ``aligned=False``: offset 0, and each
    box scaled and its width and height clamped to at least 1 first. ``sampling_ratio > 0``:
    that many samples per bin and axis; ``<= 0``: ``ceil(size / output size)``, and 0 for an
    empty or inverted box (which RoiAlign1 samples once). The same arithmetic as the raised
    ``RoiAlign`` of a torchvision export.
    """
    rois = _rois(boxes)
    size = _pair(output_size)
    corners = rois[:, 1:]
    scale, offset = spatial_scale, 0.5
    scaled = corners * spatial_scale
    starts = scaled[:, :2]
    if not aligned:
        corners = torch.cat([starts, starts + torch.clamp(scaled[:, 2:] - starts, min=1.0)], 1)
        scale, offset = 1.0, 0.0
    adaptive = sampling_ratio <= 0
    samples = sampling_ratio if not adaptive else 1
    output = torch.ops.dml_onnx.RoiAlign1(
        input, corners.contiguous(), rois[:, 0].to(torch.int64), output_size=[size[0], size[1]],
        reduction_function="average", interpolation_mode="linear", spatial_scale_x=scale,
        spatial_scale_y=scale, input_pixel_offset=offset, output_pixel_offset=-0.5,
        out_of_bounds_input_value=0.0, minimum_samples_per_output=samples,
        maximum_samples_per_output=(1 << 32) - 1 if adaptive else samples,  # UINT32_MAX
        align_regions_to_corners=0)
    if aligned and adaptive:
        sizes = (scaled[:, 2:] - 0.5) - (starts - 0.5)
        sampled = (sizes.amin(dim=1) > 0).reshape(-1, 1, 1, 1)
        output = torch.where(sampled, output, torch.zeros_like(output))
    return output


@torch.fx.wrap
def roi_pool(input: Tensor, boxes: Tensor | list[Tensor],
             output_size: BroadcastingList2[int], spatial_scale: float = 1.0) -> Tensor:
    """torchvision's ``roi_pool`` as ``RoiPooling`` -> ``[K, C, output_size]``."""
    size = _pair(output_size)
    return torch.ops.dml_onnx.RoiPooling(input, _rois(boxes), pooled_size=[size[0], size[1]],
                                         spatial_scale=spatial_scale)


class RoIAlign(nn.Module):
    """See :func:`roi_align`."""

    def __init__(self, output_size: BroadcastingList2[int], spatial_scale: float,
                 sampling_ratio: int, aligned: bool = False):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale
        self.sampling_ratio = sampling_ratio
        self.aligned = aligned

    def forward(self, input: Tensor, rois: Tensor | list[Tensor]) -> Tensor:
        return roi_align(input, rois, self.output_size, self.spatial_scale,
                         self.sampling_ratio, self.aligned)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, "
                f"spatial_scale={self.spatial_scale}, sampling_ratio={self.sampling_ratio}, "
                f"aligned={self.aligned})")


class RoIPool(nn.Module):
    """See :func:`roi_pool`."""

    def __init__(self, output_size: BroadcastingList2[int], spatial_scale: float):
        super().__init__()
        self.output_size = output_size
        self.spatial_scale = spatial_scale

    def forward(self, input: Tensor, rois: Tensor | list[Tensor]) -> Tensor:
        return roi_pool(input, rois, self.output_size, self.spatial_scale)

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(output_size={self.output_size}, "
                f"spatial_scale={self.spatial_scale})")


def _scale(feature: Tensor, image_height: int) -> float:
    """The power of two nearest ``feature height / image height`` (as torchvision infers it)."""
    approx = float(feature.shape[-2]) / float(image_height)
    return 2.0 ** float(torch.tensor(approx).log2().round())


class MultiScaleRoIAlign(nn.Module):
    """torchvision's ``MultiScaleRoIAlign`` on :func:`roi_align` (``aligned=False``).

    Each box goes to FPN level ``floor(canonical_level + log2(sqrt(area) / canonical_scale) +
    1e-6)``, clamped to the levels present; the scales are powers of two inferred on the first
    call from the feature maps and the largest image size, as torchvision does.
    """

    scales: list[float] | None

    def __init__(self, featmap_names: list[str], output_size: int | tuple[int, ...] | list[int],
                 sampling_ratio: int, *, canonical_scale: int = 224, canonical_level: int = 4):
        super().__init__()
        if isinstance(output_size, int):
            output_size = (output_size, output_size)
        self.featmap_names = featmap_names
        self.sampling_ratio = sampling_ratio
        self.output_size = tuple(output_size)
        self.scales: list[float] | None = None
        self.canonical_scale = canonical_scale
        self.canonical_level = canonical_level

    def _levels(self, boxes: list[Tensor], scales: list[float]) -> Tensor:
        k_min = int(-torch.log2(torch.tensor(scales[0], dtype=torch.float32)).item())
        k_max = int(-torch.log2(torch.tensor(scales[-1], dtype=torch.float32)).item())
        areas = torch.cat([(b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) for b in boxes])
        sides = torch.sqrt(areas)
        target = torch.floor(self.canonical_level + torch.log2(sides / self.canonical_scale)
                             + torch.tensor(1e-6, dtype=sides.dtype))
        return torch.clamp(target, min=k_min, max=k_max).to(torch.int64) - k_min

    def forward(self, x: dict[str, Tensor], boxes: list[Tensor],
                image_shapes: list[tuple[int, int]]) -> Tensor:
        features: list[Tensor] = []
        for name, feature in x.items():  # in x's order, as torchvision takes them
            if name in self.featmap_names:
                features.append(feature)
        scales = self.scales
        if scales is None:
            if len(image_shapes) == 0:
                raise ValueError("images list should not be empty")
            height = max([shape[0] for shape in image_shapes])
            scales = [_scale(feature, height) for feature in features]
            self.scales = scales
        rois = _roi_rows(boxes)
        size = [self.output_size[0], self.output_size[1]]
        if len(features) == 1:
            return roi_align(features[0], rois, size, scales[0], self.sampling_ratio)
        levels = self._levels(boxes, scales)
        first = features[0]
        result = torch.zeros([rois.shape[0], first.shape[1], size[0], size[1]],
                             dtype=first.dtype, device=first.device)
        for level, (feature, scale) in enumerate(zip(features, scales)):
            chosen = torch.where(levels == level)[0]
            result[chosen] = roi_align(feature, rois[chosen], size, scale,
                                       self.sampling_ratio).to(result.dtype)
        return result

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}(featmap_names={self.featmap_names}, "
                f"output_size={self.output_size}, sampling_ratio={self.sampling_ratio})")
