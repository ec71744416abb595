"""GPU checks of fo_lib.partition_tuning's timing: a call's GPU time, not the host's time to launch it."""
import time

import pytest
import torch

from fo_lib import partition_tuning

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(120)]


@pytest.mark.parametrize("host_s", [0.0003, 0.003])
def test_event_ms_measures_the_device_not_the_host(host_s):
    """A call that costs the host 0.3 or 3 ms and the GPU ~0.05 ms (a 100k-cycle sleep) times at the
    GPU's cost; timed one call at a time between two events it measured the host's time."""
    def slow_host_fast_gpu():
        time.sleep(host_s)
        torch.cuda._sleep(100_000)

    ms = partition_tuning._event_ms(slow_host_fast_gpu, repeats=3)
    assert 0.0 < ms < 0.25, ms
