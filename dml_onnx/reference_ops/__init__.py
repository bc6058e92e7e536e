"""Plain reference implementations of the ``dml_onnx`` operators, one module per operator.

These are the project's second, independent implementation, as ``onnx.reference`` is of
onnxruntime: each function is written straight from the operator specification, one output
element at a time, in float64 (Python floats) where the specification allows, and rounded
once to the output type. They share no numeric code with the fast kernels in ``dml_onnx._kernels``
(only the kernels' input checks, so that both raise the same errors), are slow, and are meant
for small inputs: the conformance suite's expected outputs, :class:`dml_onnx.ReferenceEvaluator`
and the tests that hold the kernels to them.

Each module has one function named like the module, called as its kernel is (the kernel
module's one-shot call): the input arrays positionally (``None`` for an omitted optional
input), every attribute by keyword, and ``node`` (the node's name, for errors); it returns
what the kernel returns. The attributes that several operators share are taken together
(``**shared``, ``**window_attributes``) and read through the kernels' records.
"""
