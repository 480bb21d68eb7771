"""Native linear formats (issue 13): C++ kernels on raw GGUF blocks, built once into a persistent cache
(build.py). Importing this package registers them with kernels.formats.register; the plan never names
them. A host where the extension cannot build still imports this package: the format then reports the
build failure from `unavailable`, and the plan excludes it with that reason."""
import haltwise.kernels.torch_formats  # noqa: F401  (the built-in formats register first, whoever imports us)
from haltwise.kernels.formats import register
from haltwise.kernels.native.dense_format import Float32Native
from haltwise.kernels.native.gguf_format import GGUFNative

register(GGUFNative())
register(Float32Native())
