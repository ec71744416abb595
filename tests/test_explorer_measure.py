"""The explorer's "measure on GPU" path without a GPU: a fake backend stands for the GPU, so the
reasons a view cannot run, the cache of built shapes, the median choice, the summary and the drawing
run here; tests/gpu/test_explorer_gpu.py runs the same calls on a real GPU."""
import sys

import numpy as np
import pytest

from fo_lib.experiments import explorer as E
from fo_lib.experiments.explorer import measure as EM

H100 = EM.Device("NVIDIA H100 80GB HBM3", 132, (9, 0))


class FakeShape:
    """Stamps that follow the model's waves (plus a ramp per repeat) and a call of the predicted
    length plus ``extra_ms``."""

    def __init__(self, r, extra_ms=0.05):
        self.r, self.extra_ms, self.probes, self.calls = r, extra_ms, 0, 0

    def probe(self):
        self.probes += 1
        g, ends = self.r.grid, np.cumsum(self.r.profile.wave_ms)
        stretch = 1 + 0.01 * (self.probes - 2)  # later repeats run longer: the median, the second, is the model
        start_ns = ((ends - self.r.profile.wave_ms)[g.tile_wave] * 1e6 * stretch).astype(np.int64) + 5_000
        end_ns = (ends[g.tile_wave] * 1e6 * stretch).astype(np.int64) + 5_000
        return np.stack([start_ns, end_ns, np.zeros_like(end_ns), g.schedule_index % g.ctas], 1)

    def link_curve(self):
        return self.r.curve  # the view's own: the prediction here is then the view's

    def timed_call(self):
        self.calls += 1
        pred = self.r.chosen
        rows = [dict(span="gemm", group=-1, start_ms=0.0, end_ms=pred.groups[-1].compute_end)]
        rows += [dict(span="group", group=gt.group, start_ms=gt.comm_start, end_ms=gt.comm_end) for gt in pred.groups]
        end = pred.total_ms + self.extra_ms * self.calls  # calls grow: the median is the middle one
        return rows + [dict(span="post", group=len(pred.groups) - 1, start_ms=pred.total_ms, end_ms=end)]


class FakeBackend:
    def __init__(self, device=H100, reason=""):
        self._device, self._reason, self.builds, self.said = device, reason, [], []

    def device(self):
        return self._device, self._reason

    def build(self, r, progress):
        progress("compiling (fake)")
        self.builds.append(EM.cache_key(r))
        return FakeShape(r)


# --- why a view cannot run -------------------------------------------------------------------------
def test_no_gpu_gives_the_reason_the_control_shows():
    r = E.explore()
    assert EM.measure_problem(r, None) == "needs a CUDA GPU: none visible"
    m = EM.Measurer(FakeBackend(None, EM.NO_GPU))
    assert m.problem(r) == EM.NO_GPU
    with pytest.raises(RuntimeError, match="none visible"):
        m.measure(r)


def test_the_cuda_backend_on_this_cpu_machine_sees_no_gpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: tests/gpu covers this machine")
    device, reason = EM.CudaBackend().device()
    assert device is None and reason == EM.NO_GPU
    assert EM.Measurer().problem(E.explore()) == EM.NO_GPU


@pytest.mark.parametrize("device, changes, says", [
    (EM.Device("NVIDIA A100", 108, (8, 0)), {}, "needs compute capability 9.0; the NVIDIA A100 has 8.0"),
    (EM.Device("small GPU", 64, (9, 0)), {}, "runs 108 CTAs but the small GPU has 64 SMs"),
])
def test_a_view_the_gpu_cannot_run_names_why(device, changes, says):
    why = EM.measure_problem(E.explore(**changes), device)
    assert says in why and "\n" not in why


def test_a_view_that_fits_has_no_problem():
    assert EM.measure_problem(E.explore(), H100) is None
    portable = E.explore(tile="portable 128x256x32")
    assert EM.measure_problem(portable, EM.Device("NVIDIA A100", 108, (8, 0))) is None


# --- measuring, cached by shape --------------------------------------------------------------------
def test_repeated_measures_of_one_shape_build_it_once():
    backend = FakeBackend()
    m = EM.Measurer(backend, cache_size=2)
    r = E.explore()
    said = []
    first = m.measure(r, progress=said.append)
    again = m.measure(E.explore())
    assert len(backend.builds) == 1 and not first.reused and again.reused
    assert said[0] == "compiling (fake)" and said[-1].startswith("measuring")
    m.measure(E.explore(M=2048))  # another shape: built
    m.measure(E.explore(partition="finest"))  # another partition: another plan
    assert len(backend.builds) == 3 and len(m.cache) == 2  # the oldest dropped
    m.measure(r)
    assert len(backend.builds) == 4  # it was dropped, so it is built again


def test_cache_keeps_the_most_recent_and_counts_reuse():
    cache, built = EM.ShapeCache(2), []
    make = lambda k: (lambda: built.append(k) or k)  # noqa: E731
    assert cache.get("a", make("a")) == ("a", False)
    assert cache.get("b", make("b")) == ("b", False)
    assert cache.get("a", make("a")) == ("a", True)  # a is now the most recent
    cache.get("c", make("c"))  # drops b
    assert cache.get("a", make("a"))[1] and not cache.get("b", make("b"))[1]
    assert built == ["a", "b", "c", "b"]


def test_a_measure_keeps_the_median_call_and_reports_the_difference():
    r = E.explore()
    got = EM.Measurer(FakeBackend()).measure(r, repeats=3)
    # The fake's calls end at predicted + 0.05, + 0.10, + 0.15 ms: the median is + 0.10.
    assert got.measured_ms == pytest.approx(r.chosen.total_ms + 0.10)
    # Stamps on the view's waves and the view's own curve: the prediction here is the view's.
    assert got.predicted_ms == pytest.approx(r.chosen.total_ms, rel=1e-5)
    assert got.view_predicted_ms == r.chosen.total_ms
    assert got.difference_ms == pytest.approx(0.10, abs=1e-4)
    # The stamps, from the first tile's start, end where the model's waves end (the median probe).
    assert got.tile_end_ms.max() == pytest.approx(got.model_wave_end_ms[-1], abs=1e-5)
    assert got.tile_start_ms.min() == 0.0
    text = got.summary()
    assert f"measured {got.measured_ms:.3f} ms vs predicted {got.predicted_ms:.3f} ms (+0.100 ms" in text
    assert f"link 'h200x2 nccl' predicts {r.chosen.total_ms:.3f} ms" in text
    assert "partition (1,2,7)" in text and "\n" not in text


class SlowLinkShape(FakeShape):
    """The link here is ten times slower than the view's, the GEMM's waves twice as long."""

    def probe(self):
        probe = super().probe()
        probe[:, :2] = 2 * (probe[:, :2] - 5_000) + 5_000
        return probe

    def link_curve(self):
        from fo_lib.profiles import BandwidthCurve
        c = self.r.curve
        return BandwidthCurve(tuple((b, 10 * ms) for b, ms in c.points), c.primitive, c.world_size, "emulated")


def test_the_prediction_is_made_on_the_waves_and_the_link_measured_here():
    from fo_lib.predictor import OverlapModel

    r = E.explore()
    backend = FakeBackend()
    backend.build = lambda r, progress: SlowLinkShape(r)
    got = EM.Measurer(backend).measure(r)
    profile = EM.stamped_profile(r, got.tile_end_ms, got.device)
    np.testing.assert_allclose(profile.wave_ms, 2 * np.asarray(r.profile.wave_ms), atol=4e-6)  # whole ns
    assert profile.gpu == H100.name and profile.wave_bytes == r.profile.wave_bytes
    slow = SlowLinkShape(r).link_curve()
    want = OverlapModel(profile, slow, r.inp.model).predict(tuple(r.chosen.partition)).total_ms
    assert got.predicted_ms == pytest.approx(want) and got.predicted_ms > 3 * r.chosen.total_ms
    assert got.predicted.partition == r.chosen.partition


def test_the_link_is_timed_from_the_smallest_wave_to_the_whole_output():
    r = E.explore()
    sizes = EM.link_sizes(r)
    assert sizes[0] == max(min(r.profile.wave_bytes), 1024) and sizes[-1] == sum(r.profile.wave_bytes)
    assert len(sizes) == 8 and (np.diff(sizes) > 0).all()


def test_tile_times_are_ms_from_the_first_start():
    probe = np.array([[2_000_000, 3_000_000, 0, 0], [1_000_000, 4_500_000, 1, 1]])
    start, end = EM.tile_times(probe)
    np.testing.assert_allclose(start, [1.0, 0.0])
    np.testing.assert_allclose(end, [2.0, 3.5])


# --- drawing ---------------------------------------------------------------------------------------
def test_the_measured_figure_puts_stamps_on_the_waves_and_the_call_on_the_prediction():
    from fo_lib.experiments.explorer.draw_measured import draw_measured

    got = EM.Measurer(FakeBackend()).measure(E.explore())
    fig = draw_measured(got)
    axes = {ax.get_label(): ax for ax in fig.axes}
    waves, calls = axes["waves"], axes["calls"]
    assert len(waves.patches) == got.explored.num_waves  # one box per modelled wave
    dots = waves.lines[0]
    np.testing.assert_array_equal(dots.get_xdata(), got.tile_end_ms)
    lanes = [t.get_text() for t in calls.get_yticklabels()]
    assert lanes == ["predicted GEMM", "predicted comm", "measured GEMM", "measured comm", "post-reorder"]
    assert f"difference {got.difference_ms:+.3f} ms" in calls.get_title()
    assert E.render_png(fig)[:4] == b"\x89PNG"


# --- the widget: typed dimensions and the measure control ------------------------------------------
class FakeMeasurer(EM.Measurer):
    def __init__(self, device=H100, reason="", fail=None):
        super().__init__(FakeBackend(device, reason))
        self.fail = fail

    def measure(self, r, progress=None, repeats=3):
        if self.fail:
            raise self.fail
        return super().measure(r, progress, repeats)


def test_typed_m_is_exact_and_moves_the_slider():
    pytest.importorskip("ipywidgets")
    box = E.widget(measurer=FakeMeasurer())
    box.controls["M"].value = "3000"  # off the slider's 128 grid: kept as typed
    assert box.summary.value == f"<b>{E.explore(M=3000).summary()}</b>"
    assert box.sliders["M"].value == 3000
    box.controls["K"].value = " 2_048 "
    assert box.controls["K"].value == "2048" and box.sliders["K"].value == 2048
    assert box.summary.value == f"<b>{E.explore(M=3000, K=2048).summary()}</b>"


@pytest.mark.parametrize("text, says", [("40x96", "M must be a positive integer, got '40x96'"),
                                        ("", "M must be a positive integer, got ''"),
                                        ("0", "M must be in [1, 1048576], got 0"),
                                        ("99999999", "M must be in [1, 1048576]")])
def test_bad_typed_m_shows_one_line_and_keeps_the_figure(text, says):
    pytest.importorskip("ipywidgets")
    box = E.widget(measurer=FakeMeasurer())
    png, summary = box.image.value, box.summary.value
    box.controls["M"].value = text
    assert says in box.status.value and "input error" in box.status.value
    assert "Traceback" not in box.status.value and "\n" not in box.status.value
    assert box.image.value == png and box.summary.value == summary


def test_without_a_gpu_the_measure_control_is_disabled_with_its_reason():
    pytest.importorskip("ipywidgets")
    box = E.widget(measurer=FakeMeasurer(None, EM.NO_GPU))
    assert box.measure_button.disabled
    assert EM.NO_GPU in box.measure_reason.value
    assert box.measure_button.description == "measure on GPU"


def test_a_view_too_big_for_the_gpu_disables_the_control_until_it_fits():
    pytest.importorskip("ipywidgets")
    box = E.widget(measurer=FakeMeasurer(EM.Device("small GPU", 100, (9, 0))))
    assert box.measure_button.disabled and "runs 108 CTAs" in box.measure_reason.value
    box.controls["comm_sms"].value = 40  # 92 CTAs
    assert not box.measure_button.disabled and box.measure_reason.value == ""


def test_measure_draws_the_measured_view_and_a_new_view_hides_it():
    pytest.importorskip("ipywidgets")
    box = E.widget(measurer=FakeMeasurer())
    assert not box.measure_button.disabled and box.measured_image.layout.display == "none"
    box.measure_button.click()
    assert box.measured_image.value[:4] == b"\x89PNG" and box.measured_image.layout.display is None
    assert "measured " in box.measured_summary.value and "vs predicted" in box.measured_summary.value
    assert not box.measure_button.disabled
    box.controls["M"].value = "2048"
    assert box.measured_image.layout.display == "none" and box.measured_summary.value == ""


def test_a_failed_measure_shows_one_line_and_leaves_the_control_usable():
    pytest.importorskip("ipywidgets")
    box = E.widget(measurer=FakeMeasurer(fail=RuntimeError("CUDA error: out of memory\nmore lines")))
    box.measure_button.click()
    assert "measure failed: RuntimeError: CUDA error: out of memory" in box.measure_reason.value
    assert "more lines" not in box.measure_reason.value
    assert not box.measure_button.disabled


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="device nodes are read on Linux only")
def test_no_device_node_decides_without_torch(tmp_path):
    assert EM.no_device_node(tmp_path, env={})  # an empty /dev: nothing to see
    (tmp_path / "nvidia0").touch()
    assert not EM.no_device_node(tmp_path, env={})
    assert EM.no_device_node(tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})  # all hidden
    assert EM.no_device_node(tmp_path, env={"CUDA_VISIBLE_DEVICES": "-1"})
    assert not EM.no_device_node(tmp_path, env={"CUDA_VISIBLE_DEVICES": "0"})
