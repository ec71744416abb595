"""fo_lib.postops' launcher: the vectorized path's choice, a reused launcher and its graph capture, a
side stream and an empty output, and the arguments it refuses."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import jit, postops  # noqa: E402
from fo_lib.postops import PostOps  # noqa: E402
from postops_cases import OPS, assert_close, make_buf, run_case, tile_layout, to_np  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


def test_summed_copies_validation():
    R, N, BN = 8, 256, 64
    table, size = tile_layout(R, N, 4, BN, np.random.default_rng(2))
    buf = make_buf(table, 2 * size, R, N, BN, "bf16", 2)
    t = torch.from_numpy(table).cuda()
    stride = torch.full_like(t, size)
    pr = postops.post_reorder
    with pytest.raises(ValueError, match="peer_stride goes with"):
        pr(buf, t, (R, N), BN, sources=2)
    with pytest.raises(ValueError, match="peer_stride goes with"):
        pr(buf, t, (R, N), BN, peer_stride=stride)
    with pytest.raises(ValueError, match="sources must be"):
        pr(buf, t, (R, N), BN, sources=postops.MAX_SOURCES + 1, peer_stride=stride)
    with pytest.raises(ValueError, match="peer_stride must be"):
        pr(buf, t, (R, N), BN, sources=2, peer_stride=stride.int())
    with pytest.raises(ValueError, match="outside buf"):
        pr(buf, t, (R, N), BN, sources=2, peer_stride=stride * 4, check_table=True)


def test_auto_path_choice():
    """The vectorized path is taken for aligned shapes (the timing-relevant one)."""
    R, N, BN = 8, 4096, 128
    rng = np.random.default_rng(0)
    table, size = tile_layout(R, N, 4, BN, rng)
    buf = make_buf(table, size, R, N, BN, "bf16", 0)
    t = torch.from_numpy(table).cuda()
    assert postops.post_reorder_launcher(buf, t, (R, N), BN).vectorized
    postops.post_reorder(buf, t, (R, N), BN, vectorized=True)  # must not raise
    odd_ld = torch.empty(R, N + 3, dtype=torch.bfloat16, device="cuda")[:, :N - 8]  # row stride not % 8
    assert not postops.post_reorder_launcher(buf, t, (R, N - 8), BN, out=odd_ld).vectorized
    with pytest.raises(ValueError, match="vectorized"):
        postops.post_reorder(buf, t, (R, N - 8), BN, vectorized=True, out=odd_ld)
    assert not postops.post_reorder_launcher(buf[1:], t, (R, N), BN).vectorized  # buf not 16-byte aligned


def test_launcher_reuse_and_graph_capture():
    R, N, BN = 64, 4096, 128
    rng = np.random.default_rng(21)
    table, size = tile_layout(R, N, 16, BN, rng)
    buf = make_buf(table, size, R, N, BN, "bf16", 21)
    t = torch.from_numpy(table).cuda()
    w = (0.5 + torch.rand(N, device="cuda")).to(torch.bfloat16)
    ops = PostOps(rmsnorm=True)
    ref = postops.post_reorder_reference(to_np(buf), table, (R, N), BN, ops, weight=to_np(w))
    launch = postops.post_reorder_launcher(buf, t, (R, N), BN, ops, weight=w)
    assert launch.vectorized
    launch()
    torch.cuda.synchronize()
    assert_close(launch.out, ref, "bf16", "launcher")
    launch.out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with jit.capture_graph(graph):
        launch()  # no stream given: the launch must go to the capturing stream
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    assert_close(launch.out, ref, "bf16", "graph replay")


def test_side_stream_and_empty():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        run_case(17, 4096, 8, 128, "bf16", OPS["add_rmsnorm"], seed=3, in_place=True, stream=s)
    R, N, BN = 0, 64, 32
    buf = torch.zeros(16, dtype=torch.bfloat16, device="cuda")
    out = postops.post_reorder(buf, torch.zeros((0, 2), dtype=torch.int64, device="cuda"), (R, N), BN)
    assert out.shape == (0, 64)


def test_validation_errors():
    R, N, BN = 8, 256, 64
    rng = np.random.default_rng(1)
    table, size = tile_layout(R, N, 4, BN, rng)
    buf = make_buf(table, size, R, N, BN, "bf16", 1)
    t = torch.from_numpy(table).cuda()
    bf, f16 = torch.bfloat16, torch.float16
    w = torch.ones(N, dtype=bf, device="cuda")
    pr = postops.post_reorder
    with pytest.raises(ValueError, match="CUDA"):
        pr(buf.cpu(), t, (R, N), BN)
    with pytest.raises(TypeError, match="bfloat16 or float16"):
        pr(buf.float(), t, (R, N), BN)
    with pytest.raises(TypeError, match="int64"):
        pr(buf, t.int(), (R, N), BN)
    with pytest.raises(ValueError, match="shape"):
        pr(buf, t[:, :-1].contiguous(), (R, N), BN)
    with pytest.raises(ValueError, match="contiguous"):
        pr(buf, torch.empty(t.shape[1], R, dtype=torch.int64, device="cuda").T, (R, N), BN)
    with pytest.raises(ValueError, match="no weight"):
        pr(buf, t, (R, N), BN, PostOps(rmsnorm=True))
    with pytest.raises(ValueError, match="not enable"):
        pr(buf, t, (R, N), BN, PostOps(), weight=w)
    with pytest.raises(TypeError, match="dtype"):
        pr(buf, t, (R, N), BN, PostOps(rmsnorm=True), weight=w.to(f16))
    with pytest.raises(ValueError, match="shape"):
        pr(buf, t, (R, N), BN, PostOps(bias=True), bias=torch.ones(N + 1, dtype=bf, device="cuda"))
    with pytest.raises(ValueError, match="contiguous"):
        pr(buf, t, (R, N), BN, PostOps(residual=True),
           residual=torch.ones(N, R, dtype=bf, device="cuda").T)
    with pytest.raises(ValueError, match="N <="):
        big = postops.MAX_NORM_N + 8
        pr(buf, torch.zeros(R, -(-big // BN), dtype=torch.int64, device="cuda"), (R, big), BN,
           PostOps(rmsnorm=True), weight=torch.ones(big, dtype=bf, device="cuda"))
    with pytest.raises(ValueError, match="outside buf"):
        bad = t.clone()
        bad[3, 2] = size - 10
        pr(buf, bad, (R, N), BN, check_table=True)
    with pytest.raises(ValueError, match="outside buf"):
        bad = t.clone()
        bad[0, 0] = -1
        pr(buf, bad, (R, N), BN, check_table=True)
    with pytest.raises(ValueError, match="overlaps"):
        pr(buf, t, (R, N), BN, out=buf[:R * N].view(R, N))
    big = torch.randn(R * N + 8, device="cuda").to(bf)
    with pytest.raises(ValueError, match="overlaps residual"):  # partial overlap (an exact alias is fine)
        pr(buf, t, (R, N), BN, PostOps(residual=True, residual_out=True), residual=big[:R * N].view(R, N),
           residual_out=big[8:8 + R * N].view(R, N))
    with pytest.raises(ValueError, match="out must have shape"):
        pr(buf, t, (R, N), BN, out=torch.empty(R, N + 1, dtype=bf, device="cuda"))
    with pytest.raises(ValueError, match="unit column stride"):
        pr(buf, t, (R, N), BN, out=torch.empty(N, R, dtype=bf, device="cuda").T)
    with pytest.raises(ValueError, match="BN"):
        pr(buf, t, (R, N), 0)
    with pytest.raises(ValueError, match="out_shape"):
        pr(buf, t, (R,), BN)
