"""CuPy executors of the compute references: kernel loader, device wrappers, resident indexes.

Importing this package imports nothing from CuPy; each module imports it when first used.
"""

__all__: list[str] = []
