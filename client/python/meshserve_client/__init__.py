"""meshserve's Python client: NumPy in, NumPy out, over gRPC.

    from meshserve_client import MeshserveClient, MeshserveError
    with MeshserveClient("localhost:8500") as c:
        print(c.ready(), c.status())
        y = c.infer("linear", {"x": x}, out_sharding={"y": "P(None, 'data')"})["y"]
        ids = [t for ch in c.generate("lm", prompt_ids=[1, 2]) for t in ch.token_ids]
        push = c.begin_push("lm")            # weight sync: meshserve_client.params
        push.put("wte.weight", w)
        version = push.commit()
        w0 = c.pull("lm", "wte.weight", offset=[0, 0], shape=[8, 64], version=version)

The gRPC stubs (meshserve_client.proto) are generated from proto/*.proto at
build time into build/python/ (client/python/CMakeLists.txt); put that
directory on PYTHONPATH. See client/python/README.md.
"""
from .client import (GenerateChunk, GenerateStream, GenerateUsage, InferResult, MeshserveClient,
                     MeshserveError)
from .params import Push
from .tensors import from_bfloat16_bits, to_bfloat16_bits

__all__ = ["GenerateChunk", "GenerateStream", "GenerateUsage", "InferResult", "MeshserveClient",
           "MeshserveError", "Push",
           "from_bfloat16_bits", "to_bfloat16_bits"]
