"""The peer libraries' registry, status probe and adapters, without the libraries: their metadata,
the probe's reasons (not installed, too old, torch missing, an import failing) on stand-in packages,
and the adapters' call conventions on stand-ins that record what they were called with."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from normprops.backends import peers
from normprops.backends.peers import (
    LIBRARIES,
    PEER_OP_NAMES,
    PEER_OPS,
    PeerUnavailable,
    adapter,
    bind,
    get_library,
    get_peer_op,
    peer_ops,
    peer_status,
)


@pytest.fixture(autouse=True)
def _fresh_probe():
    peer_status.cache_clear()
    adapter.cache_clear()
    yield
    peer_status.cache_clear()
    adapter.cache_clear()


def test_every_library_has_every_op_once() -> None:
    for library in LIBRARIES:
        assert sorted(p.op for p in peer_ops(library=library)) == sorted(PEER_OP_NAMES), library
    names = [p.name for p in PEER_OPS]
    assert len(names) == len(set(names))
    for p in PEER_OPS:
        assert p.name.startswith(p.library + "."), p
        assert set(p.dtypes) <= {"float32", "bfloat16", "float16"} and p.dtypes, p
        assert p.math and p.call, p
        assert p.signature.startswith(("softmax(", "layer_norm(", "rms_norm(", "add_rms_norm(")), p


@pytest.mark.parametrize("library, op, dtype, cols, reason", [
    pytest.param("liger", "softmax", "bfloat16", 65536, None, id="liger-widest-row"),
    pytest.param("liger", "softmax", "bfloat16", 65537, "at most 65536 columns", id="liger-one-past"),
    pytest.param("liger", "rmsnorm", "float32", 151936, "at most 65536 columns", id="liger-vocab"),
    pytest.param("quack", "softmax", "bfloat16", 4097, "multiple of 16 bytes (8 bfloat16 columns)",
                 id="quack-softmax-odd"),
    pytest.param("quack", "softmax", "float32", 4098, "(4 float32 columns)", id="quack-softmax-f32-ragged"),
    pytest.param("quack", "softmax", "float32", 4100, None, id="quack-softmax-f32-aligned"),
    pytest.param("quack", "softmax", "bfloat16", 151936, None, id="quack-softmax-vocab"),
    pytest.param("quack", "rmsnorm", "bfloat16", 4097, None, id="quack-rmsnorm-any-width"),
    pytest.param("quack", "addrmsnorm", "bfloat16", 5121, None, id="quack-fused-any-width"),
])
def test_unsupported_reads_the_constraints(library: str, op: str, dtype: str, cols: int,
                                            reason: str | None) -> None:
    got = get_peer_op(library, op).unsupported(dtype=dtype, cols=cols)
    if reason is None:
        assert got is None
    else:
        assert got is not None and reason in got, got


@pytest.mark.parametrize("call, match", [
    pytest.param(lambda: get_library("triton"), "library must be one of", id="library"),
    pytest.param(lambda: peer_ops(op="gelu"), "op must be one of", id="op"),
    pytest.param(lambda: get_peer_op("liger", "gelu"), "op must be one of", id="peer-op"),
    pytest.param(lambda: get_peer_op("quack", "softmax").unsupported(dtype="float64", cols=8),
                 "dtype must be one of", id="dtype"),
    pytest.param(lambda: get_peer_op("quack", "softmax").unsupported(dtype="float32", cols=0),
                 "cols must be at least 1 but was 0", id="cols"),
])
def test_bad_arguments_are_named(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_importing_the_registry_imports_no_library() -> None:
    code = ("import sys, normprops.backends.peers, normprops.bench; "
            "print(sorted(m for m in ('torch', 'triton', 'liger_kernel', 'quack', 'cutlass', 'cupy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- stand-in packages -------------------------------------------------------------------------

_LIGER_OPS = {
    "softmax": "LigerSoftmaxFunction",
    "layer_norm": "LigerLayerNormFunction",
    "rms_norm": "LigerRMSNormFunction",
    "fused_add_rms_norm": "LigerFusedAddRMSNormFunction",
}


def _dist_info(root: Path, dist: str, version: str) -> None:
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")


def _fake_liger(root: Path, *, version: str = "0.8.5", broken: str | None = None) -> None:
    """liger_kernel with the four ops' Functions recording their arguments in liger_kernel.CALLS;
    the module ``broken`` (an op name) raises ImportError instead."""
    pkg = root / "liger_kernel"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("CALLS = []\n")
    (pkg / "ops" / "__init__.py").write_text("")
    for module, cls in _LIGER_OPS.items():
        body = ("raise ImportError(\"No module named 'triton'\")\n" if module == broken
                else textwrap.dedent(f"""
            import liger_kernel

            class {cls}:
                @staticmethod
                def apply(*args):
                    liger_kernel.CALLS.append(({cls!r}, args))
                    return ("out", "new_residual") if {cls!r} == "LigerFusedAddRMSNormFunction" else "out"
            """))
        (pkg / "ops" / f"{module}.py").write_text(body)
    _dist_info(root, "liger-kernel", version)


def _fake_quack(root: Path) -> None:
    pkg = root / "quack"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("CALLS = []\n")
    (pkg / "softmax.py").write_text("import quack\n\ndef softmax(x):\n"
                                    "    quack.CALLS.append(('softmax', x))\n    return 'out'\n")
    (pkg / "rmsnorm.py").write_text(textwrap.dedent("""
        import quack

        def rmsnorm(x, weight=None, bias=None, residual=None, eps=1e-6, prenorm=False):
            quack.CALLS.append(("rmsnorm", x, weight, residual, eps, prenorm))
            return ("out", "residual_out") if residual is not None and prenorm else "out"

        def layernorm_fwd(x, weight, bias=None, eps=1e-6):
            quack.CALLS.append(("layernorm_fwd", x, weight, bias, eps))
            return "out"
        """))
    (pkg / "cross_entropy.py").write_text("def cross_entropy(*args, **kwargs):\n"
                                          "    raise NotImplementedError\n")
    _dist_info(root, "quack-kernels", "0.6.5")


class _Tensor:
    """Enough of a torch tensor for ``bind``: dtype, shape, device, and ``to`` recording casts."""

    casts: list[str] = []

    def __init__(self, dtype: str, shape: tuple[int, ...], name: str) -> None:
        self.dtype, self.shape, self.name = f"torch.{dtype}", shape, name
        self.is_cuda, self.device = True, "cuda:0"

    def dim(self) -> int:
        return len(self.shape)

    def to(self, kind: str) -> _Tensor:
        if f"torch.{kind}" == self.dtype:
            return self
        _Tensor.casts.append(f"{self.name}->{kind}")
        return _Tensor(kind, self.shape, f"{self.name}:{kind}")

    def __repr__(self) -> str:
        return self.name


@pytest.fixture
def stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """tmp_path on sys.path for stand-in packages, a stand-in torch with a GPU, and no trace of
    either left in sys.modules afterwards."""
    before = set(sys.modules)
    torch = types.ModuleType("torch")
    torch.__version__ = "2.11.0+stand-in"
    torch.cuda = types.SimpleNamespace(is_available=lambda: True)
    torch.float32, torch.bfloat16, torch.float16 = "float32", "bfloat16", "float16"
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.syspath_prepend(str(tmp_path))
    _Tensor.casts = []
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.split(".")[0] in ("liger_kernel", "quack"):
            del sys.modules[name]


def test_status_when_not_installed() -> None:
    for library in LIBRARIES:
        lib = get_library(library)
        if peers.importlib.util.find_spec(lib.module) is not None:
            pytest.skip(f"{lib.distribution} is installed here")
        ok, why = peer_status(library)
        assert not ok and f"{lib.distribution} is not installed" in why and "docs/peers.md" in why
        with pytest.raises(PeerUnavailable, match=f"^{library}: .*not installed"):
            adapter(library, "rmsnorm")


def test_status_names_an_old_version(stand_ins: Path) -> None:
    _fake_liger(stand_ins, version="0.3.1")
    ok, why = peer_status("liger")
    assert not ok and "liger-kernel 0.3.1 is older than 0.8.5" in why


def test_status_without_torch(stand_ins: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_liger(stand_ins)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    ok, why = peer_status("liger")
    assert not ok and "needs torch, which is not importable" in why


def test_status_without_a_gpu(stand_ins: Path) -> None:
    _fake_liger(stand_ins)
    sys.modules["torch"].cuda = types.SimpleNamespace(is_available=lambda: False)
    ok, why = peer_status("liger")
    assert not ok and "needs a CUDA device; torch 2.11.0+stand-in sees none" in why


def test_status_names_the_module_that_failed_to_import(stand_ins: Path) -> None:
    _fake_liger(stand_ins, broken="rms_norm")
    ok, why = peer_status("liger")
    assert not ok
    assert why == ("liger-kernel 0.8.5: import liger_kernel.ops.rms_norm failed "
                   "(ImportError: No module named 'triton')")


def test_liger_adapters_call_the_triton_functions(stand_ins: Path) -> None:
    _fake_liger(stand_ins)
    assert peer_status("liger") == (True, "liger-kernel 0.8.5, Triton (liger_kernel.ops.<op> Functions, "
                                          "forward only), torch 2.11.0+stand-in")
    x, r, g, b = (_Tensor("bfloat16", s, n)
                  for s, n in (((4, 8), "x"), ((4, 8), "r"), ((8,), "g"), ((8,), "b")))
    launches = {op: bind(get_peer_op("liger", op), x=x, gamma=g, beta=b, residual=r, eps=1e-5)
                for op in PEER_OP_NAMES}
    results = {op: launch() for op, launch in launches.items()}
    assert results["addrmsnorm"] == ("out", "new_residual")
    import liger_kernel

    assert liger_kernel.CALLS == [
        ("LigerSoftmaxFunction", (x,)),
        ("LigerLayerNormFunction", (x, g, b, 1e-5)),
        ("LigerRMSNormFunction", (x, g, 1e-5, 0.0, "gemma")),
        ("LigerFusedAddRMSNormFunction", (x, r, g, 1e-5, 0.0, "gemma")),
    ]
    assert _Tensor.casts == []


def test_quack_adapters_convert_layer_norm_weights_once(stand_ins: Path) -> None:
    _fake_quack(stand_ins)
    assert peer_status("quack")[0]
    x, r, g, b = (_Tensor("bfloat16", s, n)
                  for s, n in (((4, 8), "x"), ((4, 8), "r"), ((8,), "g"), ((8,), "b")))
    launch = bind(get_peer_op("quack", "layernorm"), x=x, gamma=g, beta=b, eps=1e-5)
    launch()
    launch()
    assert _Tensor.casts == ["g->float32", "b->float32"]  # at bind, not per call
    fused = bind(get_peer_op("quack", "addrmsnorm"), x=x, gamma=g, residual=r, eps=1e-6)
    assert fused() == ("out", "residual_out")
    import quack

    assert [c[0] for c in quack.CALLS] == ["layernorm_fwd", "layernorm_fwd", "rmsnorm"]
    assert str(quack.CALLS[0][2]) == "g:float32" and str(quack.CALLS[0][3]) == "b:float32"
    assert quack.CALLS[2][1:] == (x, g, r, 1e-6, True)


@pytest.mark.parametrize("library, op, kwargs, match", [
    pytest.param("quack", "softmax", {"x": ("bfloat16", (4, 4097))}, "multiple of 16 bytes", id="width"),
    pytest.param("liger", "rmsnorm", {"x": ("bfloat16", (4, 8))}, r"needs gamma, eps", id="missing"),
    pytest.param("liger", "softmax", {"x": ("bfloat16", (8,))}, "x must be a 2-D CUDA tensor but was 1-D",
                 id="rank"),
])
def test_bind_checks_before_calling(stand_ins: Path, library: str, op: str, kwargs: dict, match: str) -> None:
    _fake_liger(stand_ins)
    _fake_quack(stand_ins)
    tensors = {k: _Tensor(dtype, shape, k) for k, (dtype, shape) in kwargs.items()}
    with pytest.raises(ValueError, match=match):
        bind(get_peer_op(library, op), **tensors)
