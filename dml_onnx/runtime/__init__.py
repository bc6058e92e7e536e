"""The onnxruntime binding: run ``dml_onnx`` nodes in onnxruntime through onnxruntime-extensions.

onnxruntime-extensions runs Python kernels ("PyOps") but passes neither list attributes nor
exact float attributes, cannot pass float16, supports only required inputs and outputs, turns
outputs into Python lists, and ends the process when a kernel raises. So a model is rewritten
before onnxruntime sees it (:func:`to_runtime_model`): every ``dml_onnx`` node becomes one PyOp
node of the private domain ``dml_onnx.runtime``, chosen for the node's element types, that

- carries the node's attributes, defaults filled in, as one exact JSON string attribute;
- gets float16 inputs through ``Cast`` to float32 and casts its outputs back;
- receives an empty tensor for an absent optional input and a throw-away name for an absent
  optional output;
- returns, next to each output, that output's shape; in a model for plain onnxruntime sessions
  a ``Reshape`` by this shape guards the output: after a failed kernel the shapes disagree, so
  onnxruntime fails the run instead of handing back a wrong tensor. (:class:`InferenceSession`
  checks every run itself and uses unguarded PyOps, which return no shapes: on a graph output
  a guard costs a copy, and every extra output time.)

The invocation hook passes numpy arrays both ways (no lists) and never lets an exception escape:
it keeps the error for the calling thread, and :class:`InferenceSession` raises it from
``run()`` as :class:`KernelError`.

onnxruntime-extensions copies every input of a PyOp into a new array and every output into
onnxruntime's buffer. :class:`InferenceSession` avoids both where it can (``direct`` rewrite):
a graph input that a ``dml_onnx`` node reads reaches the kernel as the caller's array (the PyOp
gets an empty placeholder; onnxruntime still checks the feed's type and shape), and a graph
output that only a ``dml_onnx`` node produces is handed back as the kernel's array (the PyOp
returns an empty tensor that ``run()`` replaces). Direct float16 values are converted to and
from float32 by onnxruntime's ``Cast`` (numpy's float16 conversions are about 20 times slower),
except for the operators in :data:`FLOAT16_KERNELS`, which take float16 as it is when all
their inputs of that type are direct.

Where a ``dml_onnx`` node reads or writes a value between standard nodes, even the direct
rewrite would copy it; where those values are large (:func:`~dml_onnx.runtime.plan.split_pays`:
a detector's maps and pooled regions), :class:`InferenceSession` runs the model split instead
(:mod:`~dml_onnx.runtime.plan`, :mod:`~dml_onnx.runtime.segments`): onnxruntime sessions over
the standard nodes and the kernels between them, on arrays passed without copies. Small
values are copied: each segment would be a session with a thread pool of its own.

The package, in the order a model goes through :class:`InferenceSession`
(:mod:`~dml_onnx.runtime.session`, which drives the stages):

- load: :mod:`~dml_onnx.runtime.weights` reads a model without its weights
  (:mod:`~dml_onnx.runtime.wire` walks its bytes, :mod:`~dml_onnx.runtime.stubs` names the
  weights left out), :mod:`~dml_onnx.runtime.rewrite` checks its ``dml_onnx`` nodes' types,
  and :mod:`~dml_onnx.runtime.checks` refuses what onnxruntime refuses as it does;
- plan: :mod:`~dml_onnx.runtime.plan` chooses the steps of split execution (segments,
  kernels, and the standard nodes :mod:`~dml_onnx.runtime.host_nodes` computes on the host),
  :mod:`~dml_onnx.runtime.prepare` keeps the checks and the steps per graph;
- build: :mod:`~dml_onnx.runtime.segments` creates the segments' sessions, or
  :mod:`~dml_onnx.runtime.rewrite` rewrites the model for one session of PyOps, which
  :mod:`~dml_onnx.runtime.hook` declares; :mod:`~dml_onnx.runtime.stubs` hands onnxruntime the
  weights, on the session options of :mod:`~dml_onnx.runtime.options`;
- run: :meth:`InferenceSession.run` and :mod:`~dml_onnx.runtime.segments`' steps call the
  kernels through :mod:`~dml_onnx.runtime.hook` (all the binding's process-global state);
  :mod:`~dml_onnx.runtime.checks` checks unusual feeds, and
  :mod:`~dml_onnx.runtime.io_binding` is the session's I/O binding.

:mod:`~dml_onnx.runtime.private_api` holds every private part of onnxruntime-extensions and
onnxruntime the package uses. Importing it declares the PyOps and installs the hook.
"""

from __future__ import annotations

from dml_onnx.definition import RUNTIME_DOMAIN
from dml_onnx.runtime.hook import register_runtime_ops, take_error
from dml_onnx.runtime.options import quiet_session_options
from dml_onnx.runtime.rewrite import FLOAT16_KERNELS, to_runtime_model
from dml_onnx.runtime.session import ASYNC_THREADS, InferenceSession

__all__ = ["ASYNC_THREADS", "FLOAT16_KERNELS", "RUNTIME_DOMAIN", "InferenceSession",
           "quiet_session_options", "register_runtime_ops", "take_error", "to_runtime_model"]
