"""User-style example kernels (correct and planted-bug) for ``normprops hunt --impl``."""
