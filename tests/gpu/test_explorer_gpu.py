"""The explorer's "measure on GPU" end to end on a real GPU: the shown view's tile stamps and one
overlapped call on the emulated link, a repeated measure reusing what the first built, and the
widget's button drawing the measured view. Checks are loose on purpose (any H100/H200, any load):
they hold the shape of the result, not its speed."""
import numpy as np
import pytest

from fo_lib.experiments import explorer as E
from fo_lib.experiments.explorer import measure as EM


def _tile():
    # The recorded views use the Hopper kernel; elsewhere the portable one runs the same shapes.
    from fo_lib.gemm import sm90
    return "sm90 128x256x64" if sm90.is_supported() else "portable 128x256x32"


class CountingBackend(EM.CudaBackend):
    def __init__(self):
        super().__init__()
        self.builds = 0

    def build(self, r, progress):
        self.builds += 1
        return super().build(r, progress)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("link", ["h200 emulated", "h200x2 nccl"])
def test_measure_stamps_every_tile_times_the_call_and_reuses_the_shape(link):
    backend = CountingBackend()
    measurer = EM.Measurer(backend)
    r = E.explore(link=link, tile=_tile())
    assert measurer.problem(r) is None, measurer.problem(r)
    said = []
    first = measurer.measure(r, progress=said.append)
    g = r.grid
    assert first.tile_end_ms.shape == (g.num_tiles,) and np.isfinite(first.tile_end_ms).all()
    assert (first.tile_end_ms > first.tile_start_ms).all() and first.tile_start_ms.min() == 0.0
    # The waves come out in the model's order: each wave's median finish is later than the one before.
    medians = [np.median(first.tile_end_ms[g.tile_wave == w]) for w in range(g.num_waves)]
    assert np.all(np.diff(medians) > 0), medians
    assert {"gemm", "group"} <= {s["span"] for s in first.spans}
    assert sum(s["span"] == "group" for s in first.spans) == len(r.chosen.partition)
    assert 0 < first.measured_ms < 100 and first.predicted_ms > 0
    # Like with like on either view: the prediction is made on the waves and the link measured here.
    assert 0.8 < first.measured_ms / first.predicted_ms < 1.25, first.summary()
    assert first.predicted.partition == r.chosen.partition and first.view_predicted_ms == r.chosen.total_ms
    assert said and not first.reused

    again = measurer.measure(E.explore(link=link, tile=_tile()))
    assert again.reused and backend.builds == 1
    print(f"{link}: first measure {first.seconds:.2f} s, repeated {again.seconds:.2f} s; {again.summary()}")
    assert again.seconds < 5.0  # a repeat only times: 3 probes and 3 gated calls


@pytest.mark.timeout(600)
def test_a_portable_tile_and_a_reduce_scatter_measure_too():
    measurer = EM.Measurer()
    r = E.explore(link="h200 emulated", tile="portable 128x256x32", M=2048, primitive="reduce_scatter")
    got = measurer.measure(r)
    assert got.tile_end_ms.shape == (r.grid.num_tiles,)
    assert sum(s["span"] == "group" for s in got.spans) == len(r.chosen.partition)


@pytest.mark.timeout(600)
def test_the_widgets_button_draws_the_measured_view_on_the_gpu():
    pytest.importorskip("ipywidgets")
    box = E.widget(E.ExplorerInput(link="h200 emulated", tile=_tile()))
    assert not box.measure_button.disabled, box.measure_reason.value
    box.measure_button.click()
    assert "measure failed" not in box.measure_reason.value, box.measure_reason.value
    assert box.measured_image.value[:4] == b"\x89PNG" and box.measured_image.layout.display is None
    assert "vs predicted" in box.measured_summary.value
