"""normprops: numerical-robustness property testing for normalization kernels.

Point it at a softmax, layer norm or RMS norm kernel and it hunts, with Hypothesis-drawn adversarial
rows judged against exact references, for the overflow, cancellation, eps-placement, ragged-shape and
race bugs these kernels are prone to; every failure comes back shrunk and saved as a fixture.
"""

__version__ = "0.1.0"
