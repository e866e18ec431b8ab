"""The CUDA side of normprops: the device code and what compiles and launches it.

- ``kernels.cu``: the textbook kernels (one block per row), hunted on the ``cuda`` backend;
- ``prod.cu``: the production kernels, hunted and benchmarked on the ``cuda-prod`` backend;
- :mod:`normprops.cuda.build`: device discovery, and the ``.cu`` sources compiled once per build;
- :mod:`normprops.cuda.textbook`: validated launchers for ``kernels.cu`` (and users' own kernels);
- :mod:`normprops.cuda.prod`: launchers for ``prod.cu``.

Importing this package imports none of them, and no module here imports CuPy at module import.
"""
