"""How the compiled loops read and write float16 (numba has no float16 on the CPU: float16
values travel as their uint16 bits), exactly as numpy converts: :func:`widened` reads them
(:func:`half_to_float`), :func:`summand` reads them into sums (:func:`half_operand`),
:func:`narrowed` writes them (:func:`float_to_half`), :func:`stored_sum` writes sums
(:func:`half_of_sum`).

Only the ``_*_loops`` modules import this one; their loops are compiled with these parts
inside (and their caches go stale when this file changes: see
:func:`dml_onnx._kernels._jit._stamp_with_imports`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from ._jit import jit


def half_to_float_ir(builder, half_bits, lanes=0):
    """The float32 value of the float16 whose bits are the uint16 ``half_bits``, by branch-free
    32-bit integer arithmetic (see :func:`half_to_float`); of each of ``lanes`` such values
    where ``half_bits`` is a vector of them."""
    word, single = ir.IntType(32), ir.FloatType()
    if lanes:
        word, single = ir.VectorType(word, lanes), ir.VectorType(single, lanes)

    def constant(value, kind=word):
        if lanes:
            return ir.Constant(kind, [ir.Constant(kind.element, value)] * lanes)
        return ir.Constant(kind, value)

    half = builder.zext(half_bits, word)
    magnitude = builder.and_(half, constant(0x7FFF))
    exponent = builder.and_(magnitude, constant(0x7C00))
    large = builder.icmp_unsigned("==", exponent, constant(0x7C00))  # infinity, NaN
    small = builder.icmp_unsigned("==", exponent, constant(0))  # zero, subnormal
    rebased = builder.add(builder.shl(magnitude, constant(13)), constant(0x38000000))
    adjust = builder.select(large, constant(0x38000000),
                            builder.select(small, constant(0x800000), constant(0)))
    value = builder.bitcast(builder.add(rebased, adjust), single)
    value = builder.select(small, builder.fsub(value, constant(2.0 ** -14, single)), value)
    sign = builder.shl(builder.and_(half, constant(0x8000)), constant(16))
    return builder.bitcast(builder.or_(builder.bitcast(value, word), sign), single)


@intrinsic
def half_to_float(typingctx, bits):
    """The float32 value of the float16 whose bits are ``bits`` (uint16), exactly (every float16
    is a float32; NaN keeps its payload, signalling or not, as numpy converts it).

    Branch-free 32-bit integer arithmetic, so that loops over it vectorise (14.5 million values
    summed into a line: 1.1 ms, 5.6 ms through a table of the 65536 values, which takes a
    scalar load per value): the exponent rebased by 112, to 255 for infinity and NaN; a
    subnormal or zero ``m * 2^-24`` as ``(1 + m / 1024) * 2^-14 - 2^-14`` (normal float32
    values: exact, and the same under flush-to-zero or denormals-are-zero); then the sign. Not
    the F16C instruction (:func:`half_operand`): it makes a signalling NaN quiet."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, arguments):
        return half_to_float_ir(builder, arguments[0])

    return types.float32(types.uint16), codegen


def _has_f16c(context) -> bool:
    """Whether the code that numba compiles for ``context`` may use F16C (its CPU features,
    which numba's cache keeps the code by)."""
    return "+f16c" in context.codegen().magic_tuple()[2].split(",")


@intrinsic
def half_operand(typingctx, bits):
    """:func:`half_to_float` for a value that arithmetic takes next, where a signalling NaN
    comes out quiet anyway: one F16C instruction for 8 or 16 values where the compiled code may
    use that CPU family (Fold's float16 row at 16 cores of one server: 0.79 ms, 2.2 ms with
    :func:`half_to_float`, whose integer work scaled 5.5x from 1 to 16 cores there), else
    :func:`half_to_float` (``NUMBA_CPU_FEATURES`` without ``+f16c``, or a CPU without it:
    LLVM would call a library function that numba's JIT does not find). numba's cache keeps
    the code per CPU name and features."""
    if bits != types.uint16:
        return None

    def codegen(context, builder, signature, arguments):
        if _has_f16c(context):
            return builder.fpext(builder.bitcast(arguments[0], ir.HalfType()), ir.FloatType())
        return half_to_float_ir(builder, arguments[0])

    return types.float32(types.uint16), codegen


def _half_into_float(target, x) -> bool:
    """Whether ``x`` is float16 bits (uint16) going into the float32 array ``target``."""
    return (isinstance(x, types.Integer) and x.bitwidth == 16 and not x.signed
            and isinstance(target, types.Array) and target.dtype == types.float32)


def _float_into_half(target, x) -> bool:
    """Whether ``x`` is a float32 going into the float16 bits (uint16 array) ``target``."""
    return (isinstance(target, types.Array) and target.dtype == types.uint16
            and x == types.float32)


def _converting(applies: Callable[[Any, Any], bool], convert: Any
                ) -> Callable[[Callable], Callable]:
    """Make an identity ``(target, x) -> x`` (its docstring says what it stands for) compile
    in numba as ``convert(x)`` where ``applies(target, x)`` holds for the argument types, as
    ``x`` elsewhere."""
    def decorate(identity: Callable) -> Callable:
        @overload(identity, inline="always")
        def compiled(target, x):
            if applies(target, x):
                return lambda target, x: convert(x)
            return lambda target, x: x
        return identity
    return decorate


@_converting(_half_into_float, half_to_float)
def widened(target, x):
    """``x`` as it is added into the array ``target``: float16 bits (uint16) into a float32
    array as their float32 value (:func:`half_to_float`), anything else as it is. A loop that
    sums in its input's own type never reads uint16 into float32, so that uint16 inputs of
    their own stay integers."""
    return x


@_converting(_half_into_float, half_operand)
def summand(target, x):
    """``x`` as a sum in the array ``target`` adds it: :func:`widened`, but float16 bits by
    :func:`half_operand` (a signalling NaN comes out quiet, as the arithmetic makes it anyway;
    only for values that ``+ - * /`` take next: ``abs``, for one, may then give NaN another
    sign bit)."""
    return x


@jit
def float_to_half(bits):
    """The bits of the float16 nearest the float32 whose bits are ``bits`` (uint32; ties to
    even; beyond float16's range: infinity; NaN stays NaN with the top of its payload), as
    numpy's ``astype(np.float16)`` rounds. Branch-free uint32 arithmetic, so that loops over
    it vectorise (about 0.3 ns a value on one thread, numpy's takes 1.5)."""
    one = np.uint32(1)
    u = bits & np.uint32(0x7FFFFFFF)
    sign = (bits >> np.uint32(16)) & np.uint32(0x8000)
    # normal: drop 13 bits, ties to even; a carry raises the exponent, up to infinity
    normal = (u - np.uint32(0x38000000) + np.uint32(0xFFF) + ((u >> np.uint32(13)) & one)) \
        >> np.uint32(13)
    # below 2^-14: the significand with its leading bit, shifted right by 126 - exponent
    shift = np.uint32(126) - (u >> np.uint32(23))
    shift = shift if shift < np.uint32(31) else np.uint32(31)
    significand = (u & np.uint32(0x7FFFFF)) | np.uint32(0x800000)
    subnormal = (significand + (one << (shift - one)) - one + ((significand >> shift) & one)) \
        >> shift
    payload = (u & np.uint32(0x7FFFFF)) >> np.uint32(13)
    nan = np.uint32(0x7C00) + (payload if payload > one else one)
    large = nan if u > np.uint32(0x7F800000) else np.uint32(0x7C00)
    small = subnormal if u < np.uint32(0x38800000) else normal
    return np.uint16(sign | (large if u >= np.uint32(0x47800000) else small))


@intrinsic
def half_of_sum(typingctx, value):
    """The bits (uint16) of the float16 nearest the float32 ``value``, a result of arithmetic
    (never a signalling NaN): one F16C instruction where the compiled code may use that CPU
    family (rounding as :func:`float_to_half` does, ties to even; NaN keeps its sign and the
    top of its payload), else :func:`float_to_half` (see :func:`half_operand`). In a strided
    loop, where :func:`float_to_half` cannot vectorise, it is one instruction against about
    twenty."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, arguments):
        if _has_f16c(context):
            half = builder.fptrunc(arguments[0], ir.HalfType())
            return builder.bitcast(half, ir.IntType(16))
        return context.compile_internal(builder, lambda x: float_to_half(float_bits(x)),
                                        signature, arguments)

    return types.uint16(types.float32), codegen


@_converting(_float_into_half, half_of_sum)
def stored_sum(target, x):
    """A sum ``x`` as the array ``target`` stores it: :func:`narrowed`, but into float16 bits by
    :func:`half_of_sum` (only for results of arithmetic, never a signalling NaN)."""
    return x


@intrinsic
def float_bits(typingctx, value):
    """The bits of the float32 ``value`` (uint32)."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, arguments):
        return builder.bitcast(arguments[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@jit
def _half_bits(value):
    """:func:`float_to_half` of the float32 ``value``."""
    return float_to_half(float_bits(value))


@_converting(_float_into_half, _half_bits)
def narrowed(target, x):
    """``x`` as the array ``target`` stores it: a float32 into a uint16 array as the bits of
    the float16 nearest it (:func:`float_to_half`), anything else as it is."""
    return x

