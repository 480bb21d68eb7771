"""The GGUF file format: the file map, metadata -> ModelConfig, size bounds, tensor names and dequantisation.

Below models/ and kernels/ (both read GGUF files through it); it imports neither.
"""
