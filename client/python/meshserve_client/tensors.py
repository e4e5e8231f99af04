"""NumPy arrays <-> Open Inference Protocol tensors (raw_input_contents).

Datatypes (KServe v2 names, common/base/dtype.cc): FP32 FP16 FP64 INT32 INT64
INT8 UINT8 BOOL map to the NumPy dtype of the same kind, little-endian. NumPy
has no bfloat16, so BF16 travels as its bits in a uint16 array:
  - an input the model declares BF16 may be given as float32 (rounded to the
    nearest bfloat16, ties to even, as JAX's astype) or as uint16 bits
    (to_bfloat16_bits);
  - a BF16 output comes back widened to float32 (exact).
"""
import numpy as np

# KServe v2 datatype -> NumPy dtype (little-endian, as the server lays it out).
DATATYPES = {
    "FP32": np.dtype("<f4"),
    "FP16": np.dtype("<f2"),
    "FP64": np.dtype("<f8"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "INT8": np.dtype("i1"),
    "UINT8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
    "BF16": np.dtype("<u2"),  # the bits; see the module comment
}
_BY_KIND = {dt.newbyteorder("="): name for name, dt in DATATYPES.items() if name != "BF16"}


def to_bfloat16_bits(x):
    """float32 -> bfloat16 bits (uint16), round to nearest even; NaN stays a
    (quiet) NaN of the same sign."""
    f32 = np.asarray(x, dtype=np.float32)
    bits = f32.view(np.uint32)
    out = bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))  # no wrap below NaN
    out >>= 16
    nan = np.isnan(f32)
    if nan.any():
        out = np.where(nan, (bits >> 16) | np.uint32(0x40), out)
    return out.astype(np.uint16)


def from_bfloat16_bits(bits):
    """bfloat16 bits (uint16) -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode_input(name, array, want=None):
    """(datatype, shape, raw bytes) of `array` for input `name`.

    `want` is the datatype the model declares for it (None: unknown), used
    only for BF16. Raises TypeError for a dtype the protocol cannot carry.
    """
    array = np.asarray(array)
    if want == "BF16" and array.dtype == np.float32:
        array = to_bfloat16_bits(array)
    if want == "BF16" and array.dtype == np.uint16:
        datatype = "BF16"
    else:
        datatype = _BY_KIND.get(array.dtype.newbyteorder("="))
        if datatype is None:
            raise TypeError("input '%s': NumPy dtype %s has no KServe v2 datatype (%s)" % (
                name, array.dtype, ", ".join(sorted(DATATYPES))))
    raw = np.ascontiguousarray(array, dtype=DATATYPES[datatype]).tobytes()
    return datatype, list(array.shape), raw


def decode_output(name, datatype, shape, raw):
    """The NumPy array of an output's raw bytes (BF16 widened to float32)."""
    dtype = DATATYPES.get(datatype)
    if dtype is None:
        raise ValueError("output '%s': unknown datatype '%s'" % (name, datatype))
    array = np.frombuffer(raw, dtype=dtype)
    count = int(np.prod(shape)) if len(shape) else 1
    if array.size != count:
        raise ValueError("output '%s': %s%s needs %d elements, got %d bytes" % (
            name, datatype, list(shape), count, len(raw)))
    array = array.reshape(shape)
    return from_bfloat16_bits(array) if datatype == "BF16" else array.copy()
