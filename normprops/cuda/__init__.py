"""The CUDA side of normprops: the device code and what compiles and launches it.

- ``kernels.cu``: the textbook kernels (one block per row), hunted on the ``cuda`` backend;
- ``prod.cu``: the production kernels, hunted and benchmarked on the ``cuda-prod`` backend;
- ``prod_decode.cu``: the norms' decode entry points (gamma and beta read with the row), built on
  ``prod.cu``'s templates and compiled on the first decode launch;
- ``prod_kept_bad.cu``: the kept-bad RMS norm with a bfloat16 accumulator, built on ``prod.cu``'s
  templates and compiled apart from the production kernels;
- ``spin_wait.cu``: the spin kernel ``normprops bench`` queues each timed batch behind;
- :mod:`normprops.cuda.build`: device discovery, and the ``.cu`` sources compiled once per build;
- :mod:`normprops.cuda.textbook`: validated launchers for ``kernels.cu`` (and users' own kernels);
- :mod:`normprops.cuda.prod`: launchers for ``prod.cu``, ``prod_decode.cu`` and ``prod_kept_bad.cu``.

Importing this package imports none of them, and no module here imports CuPy at module import.
"""
