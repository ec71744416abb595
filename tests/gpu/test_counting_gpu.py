"""GPU checks of the counting table (fo_lib.counting): a wait released by a later bump, a timeout
that becomes WaitError instead of a hang, back-to-back epochs without resets (also across the 2^32
wrap), counters already past their target."""
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")
if not torch.cuda.is_available():  # pragma: no cover - conftest skips these anyway
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fo_lib import counting  # noqa: E402
from fo_lib.counting import EpochTargets, WaitError  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


def _cycles(ms):
    import cupy
    khz = cupy.cuda.runtime.getDeviceProperties(torch.cuda.current_device())["clockRate"]
    return int(khz * ms)


def _sync(stream, seconds, what):
    t0 = time.monotonic()
    while not stream.query():
        if time.monotonic() - t0 > seconds:
            pytest.fail(f"{what}: stream still busy after {seconds} s (a wait did not return)")
        time.sleep(0.0005)


SECOND = 1_000_000_000


@pytest.fixture(autouse=True)
def _warm_wait_kernels():
    """Compile/load the wait kernels outside the timed regions."""
    c = torch.zeros(1, dtype=torch.int32, device="cuda")
    e = torch.zeros(1, dtype=torch.int32, device="cuda")
    counting.bump_counter(c, 0, 1)
    counting.wait_counter(c, 0, 1, e, SECOND)
    # NOTES: every kernel a producer stream runs while a wait spins must already be loaded: CUDA
    # loads modules lazily, and loading waits for the device, which the spinning wait holds (the
    # waits below would time out instead of being released). So run torch's kernels used as
    # producers here once: _sleep, int32 fill/copy and the int32 -> int64 copy.
    torch.cuda._sleep(1)
    f = torch.zeros(2, dtype=torch.int32, device="cuda")
    f.fill_(1)
    f[0].copy_(f[1])
    torch.zeros(1, dtype=torch.int64, device="cuda")[0].copy_(f[0])
    torch.cuda.synchronize()
    assert c.item() == 1 and e.item() == 0


@pytest.mark.timeout(60)
def test_wait_released_by_later_bump():
    counter = torch.zeros(4, dtype=torch.int32, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    snaps = torch.full((2,), -1, dtype=torch.int32, device="cuda")
    consumer = torch.cuda.Stream(priority=-1)
    producer = torch.cuda.Stream()
    torch.cuda.synchronize()

    counting.wait_counter(counter, 2, 3, err, 10 * SECOND, stream=consumer)
    with torch.cuda.stream(consumer):
        flag.fill_(1)  # runs only once the wait returned
    with torch.cuda.stream(producer):
        torch.cuda._sleep(_cycles(50))
        snaps[0].copy_(flag[0])  # the consumer is still blocked: counter 0 < 3
        counting.bump_counter(counter, 2, 1, stream=producer)
        torch.cuda._sleep(_cycles(50))
        snaps[1].copy_(flag[0])  # counter 1 < 3: still blocked
        counting.bump_counter(counter, 2, 2, stream=producer)  # reaches 3
    _sync(producer, 30, "producer")
    _sync(consumer, 30, "consumer")
    counting.check_wait_error(err, consumer)
    assert snaps.tolist() == [0, 0]
    assert flag.item() == 1
    assert counter.tolist() == [0, 0, 3, 0]


@pytest.mark.timeout(60)
def test_wait_timeout_raises_and_later_waits_skip():
    counter = torch.zeros(8, dtype=torch.int32, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    s = torch.cuda.Stream(priority=-1)
    torch.cuda.synchronize()
    t0 = time.monotonic()
    counting.wait_counter(counter, 5, 1, err, 50_000_000, stream=s)  # never satisfied: 50 ms
    for g in range(40):  # would cost 40 x 50 ms = 2 s if each timed out on its own
        counting.wait_counter(counter, g % 8, 1, err, 50_000_000, stream=s)
    _sync(s, 10, "timed-out waits")
    elapsed = time.monotonic() - t0
    assert 0.045 <= elapsed < 1.0, elapsed
    assert counting.read_wait_error(err, s) == 5
    with pytest.raises(WaitError, match="group 5") as info:
        counting.check_wait_error(err, s)
    assert info.value.group == 5
    # The word stays set (first failure wins) until the owner clears it.
    err.zero_()
    counting.check_wait_error(err, s)


@pytest.mark.timeout(60)
def test_wait_with_error_preset_returns_at_once():
    counter = torch.zeros(2, dtype=torch.int32, device="cuda")
    err = torch.full((1,), 7, dtype=torch.int32, device="cuda")
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    t0 = time.monotonic()
    counting.wait_counter(counter, 1, 100, err, 10 * SECOND, stream=s)
    _sync(s, 5, "preset error")
    assert time.monotonic() - t0 < 1.0
    with pytest.raises(WaitError) as info:
        counting.check_wait_error(err, s)
    assert info.value.group == 6


def _calls_against_a_late_producer(counter, err, calls: int, n: int, wait, end_of_call=None):
    """``calls`` back-to-back calls: on a high-priority consumer stream, ``wait(call, group, stream)``
    for every group, then ``end_of_call(stream)``; on a producer stream that starts 20 ms late (so the
    first waits really wait), ``n`` bumps per group and call. Returns the counter value each wait
    saw right after it returned, ``[calls, groups]``, once both streams drained without error."""
    groups = counter.numel()
    seen = torch.zeros(calls, groups, dtype=torch.int64, device="cuda")
    consumer = torch.cuda.Stream(priority=-1)
    producer = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(_cycles(20))
    for c in range(calls):
        for g in range(groups):
            wait(c, g, consumer)
            with torch.cuda.stream(consumer):
                seen[c, g].copy_(counter[g])
        if end_of_call is not None:
            end_of_call(consumer)
        for g in range(groups):
            for _ in range(n):
                counting.bump_counter(counter, g, 1, stream=producer)
    _sync(producer, 60, "producer")
    _sync(consumer, 60, "consumer")
    counting.check_wait_error(err, consumer)
    return seen.cpu().numpy()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("base", [0, 2**32 - 7])
def test_back_to_back_epochs(base):
    """Targets e * n (offset by a base near 2^32 to cross the wrap) with no reset between calls."""
    n, groups, epochs = 5, 3, 100
    counter = torch.full((groups,), base - 2**32 if base >= 2**31 else base, dtype=torch.int32, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    seen = _calls_against_a_late_producer(
        counter, err, epochs, n,
        lambda c, g, s: counting.wait_counter(counter, g, base + (c + 1) * n, err, 20 * SECOND, stream=s))
    final = (base + epochs * n) % 2**32
    assert [v % 2**32 for v in counter.tolist()] == [final] * groups
    observed = (seen % 2**32 - base) % 2**32  # counts since the start
    need = np.arange(1, epochs + 1)[:, None] * n
    assert (observed >= need).all(), np.argwhere(observed < need)[:5]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_epoch", [0, 2**32 - 3])
def test_device_epoch_waits(start_epoch):
    """wait_epoch reads its target from a device epoch word that the consumer stream bumps after
    each call's last wait: the same launches serve every call, across the 2^32 wrap."""
    n, groups, calls = 4, 3, 60
    start = start_epoch - 2**32 if start_epoch >= 2**31 else start_epoch
    counter = torch.full((groups,), (start_epoch * n) % 2**32, dtype=torch.int64, device="cuda")
    counter = ((counter + 2**31) % 2**32 - 2**31).to(torch.int32)  # the same bits as an int32
    epoch = torch.tensor([start], dtype=torch.int32, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    seen = _calls_against_a_late_producer(
        counter, err, calls, n,
        lambda c, g, s: counting.wait_epoch(counter, g, n, epoch, err, 20 * SECOND, stream=s),
        lambda s: counting.bump_counter(epoch, 0, 1, stream=s))
    assert epoch.item() % 2**32 == (start_epoch + calls) % 2**32
    observed = (seen % 2**32 - start_epoch * n) % 2**32  # tiles since the start
    need = np.arange(1, calls + 1)[:, None] * n
    assert (observed >= need).all(), np.argwhere(observed < need)[:5]
    # One more call's wait with no producer: it must time out, not pass on a stale epoch.
    s = torch.cuda.Stream()
    counting.wait_epoch(counter, 1, n, epoch, err, 20_000_000, stream=s)
    _sync(s, 5, "unsatisfiable epoch wait")
    with pytest.raises(WaitError, match="group 1"):
        counting.check_wait_error(err, s)


@pytest.mark.timeout(60)
def test_wait_already_past_target_returns_immediately():
    counter = torch.tensor([1000, 5, 0], dtype=torch.int32, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    t0 = time.monotonic()
    counting.wait_counter(counter, 0, 5, err, 10 * SECOND, stream=s)         # past
    counting.wait_counter(counter, 0, 1000, err, 10 * SECOND, stream=s)      # exactly reached
    counting.wait_counter(counter, 1, 2**32 - 3, err, 10 * SECOND, stream=s)  # 5 is past -3 mod 2^32
    counting.wait_counter(counter, 2, 0, err, 10 * SECOND, stream=s)         # target 0 (epoch 0)
    _sync(s, 5, "already past")
    assert time.monotonic() - t0 < 1.0
    counting.check_wait_error(err, s)
    # a counter one short of the target does wait (and times out)
    counting.wait_counter(counter, 0, 1001, err, 20_000_000, stream=s)
    _sync(s, 5, "one short")
    with pytest.raises(WaitError):
        counting.check_wait_error(err, s)


def test_wait_argument_validation():
    counter = torch.zeros(4, dtype=torch.int32, device="cuda")
    err = torch.zeros(1, dtype=torch.int32, device="cuda")
    with pytest.raises(IndexError):
        counting.wait_counter(counter, 4, 1, err, SECOND)
    with pytest.raises(TypeError):
        counting.wait_counter(counter.long(), 0, 1, err, SECOND)
    with pytest.raises(TypeError):
        counting.wait_counter(counter, 0, 1, err.long(), SECOND)
    with pytest.raises(ValueError):
        counting.wait_counter(counter, 0, 1, err, 0)
    with pytest.raises(ValueError, match="CUDA"):
        counting.bump_counter(counter.cpu(), 0, 1)
    counting.bump_counter(counter, 3, 2)
    torch.cuda.synchronize()
    assert counter.tolist() == [0, 0, 0, 2]


def test_epoch_targets_wrap():
    t = EpochTargets([3, 5])
    assert t.next() == [3, 5] and t.next() == [6, 10]
    t.epoch = 2**32 // 5
    assert t.next()[1] == ((2**32 // 5 + 1) * 5) & 0xFFFFFFFF
    with pytest.raises(ValueError):
        EpochTargets([0, 2])
