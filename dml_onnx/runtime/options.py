"""onnxruntime's session options, as the build stage sets them: the onnxruntime-extensions
library registered once (:func:`register_extensions_library`), idle workers that do not spin
(:func:`no_spinning`: through a run whose PyOps run inside it, and in a split run's segments,
:func:`segment_options`), and workers that stop spinning at a run's end, for the caller's
other sessions (:func:`quiet_session_options`).
"""

from __future__ import annotations

import onnxruntime as ort

from dml_onnx.runtime.private_api import get_library_path

_REGISTERED_KEY = "dml_onnx.extensions_library_registered"
"""The session config entry that marks options on which the onnxruntime-extensions library
is registered (registering it twice fails the session)."""
_NO_SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")
"""Session options set to "0" unless the caller set them: onnxruntime's idle worker threads
then sleep instead of spinning on the cores a Python kernel right after them needs."""


def quiet_session_options(options: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """``options`` (or new ones) for your other, plain onnxruntime sessions in a process that
    runs ``dml_onnx`` kernels: their worker threads spin while a run lasts and stop when it
    ends (``session.force_spinning_stop`` "1", unless already set), so that a kernel called
    right after them gets the cores. On the 16-core server a RoiAlign1 call (X
    ``[1,256,128,128]``, 1000 ROIs) took 9.3 ms alone, 26.0 ms right after a plain session with
    onnxruntime's defaults, 10.2 ms after one with these options (2 cores: 35.4, 58.9 and 36.0
    ms); sleeping idle workers (``allow_spinning`` "0") protected it as well (9.9 ms) but slow
    the session's own nodes by about a fifth. :class:`InferenceSession`'s segments get it
    with sleeping idle workers as well (:func:`segment_options`)."""
    options = options or ort.SessionOptions()
    if _config_entry(options, _STOP_SPINNING) is None:
        options.add_session_config_entry(_STOP_SPINNING, "1")
    return options


_STOP_SPINNING = "session.force_spinning_stop"


def segment_options(options: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """``options`` (or new ones) for the segments of a split run: workers that sleep when idle
    (:func:`no_spinning`) and stop at a run's end (:func:`quiet_session_options`), unless the
    caller set them. Each segment is a session with a pool of its own, and the kernels between
    them start threads of their own. Where a segment's idle workers spun through its run,
    onnxruntime's GEMM, which deals its work out one piece per thread, took up to twice as long
    (most likely two threads shared a core and the GEMM waited for the slowest piece; the Conv
    nodes, dealt out in many pieces, did not change). On the 16-core server, split
    runs at 16 cores against stock onnxruntime (alternating rounds, one process): the CNN with
    8 LpPooling nodes at batch 4 0.95 -> 0.39 (torch imported: 1.04 -> 0.39), Faster R-CNN 0.92
    -> 0.91 (1.05 -> 1.15, its rounds move by more); its ``FusedGemm`` nodes 9.6-15.2 -> 6.8-7.5
    ms (stock 6.4-7.1). At 2 cores 0.43 -> 0.42 and 0.86 -> 0.88."""
    options = quiet_session_options(options)
    no_spinning(options)
    return options


def no_spinning(options: ort.SessionOptions) -> None:
    """Set :data:`_NO_SPINNING` unless the caller set them: the PyOps run inside onnxruntime's
    run, so its threads must not spin through it."""
    for key in _NO_SPINNING:
        if _config_entry(options, key) is None:
            options.add_session_config_entry(key, "0")


def _config_entry(options: ort.SessionOptions, key: str) -> str | None:
    """The session config entry ``key`` of ``options``, or ``None`` where it is not set."""
    try:
        return options.get_session_config_entry(key)
    except RuntimeError:  # not set
        return None


def register_extensions_library(options: ort.SessionOptions) -> None:
    """Register onnxruntime-extensions once per options object (twice fails the session)."""
    if _config_entry(options, _REGISTERED_KEY) is None:
        options.register_custom_ops_library(get_library_path())
        options.add_session_config_entry(_REGISTERED_KEY, "1")
