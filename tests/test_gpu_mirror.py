"""The device copies of the index arrays: after a write only the rows appended cross the bus, and
what the device reads is always the host's rows (under the CPU emulation, and on a GPU)."""

from __future__ import annotations

import numpy as np

from teleo_server.gpu.ops import DeviceMirror

try:
    from _backends import device
except ImportError:  # tests/ imported as a package
    from tests._backends import device

__all__ = ["device"]  # the fixture, imported for pytest


def test_a_growing_buffer_sends_only_its_new_rows(device):
    mirror = DeviceMirror()
    buffer = np.zeros((100, 8), np.float16)  # an index's rows with room to grow
    rng = np.random.default_rng(1)
    n = 0
    for step in (5, 1, 1, 17, 30):
        buffer[n:n + step] = rng.normal(size=(step, 8))
        n += step
        before = mirror.uploaded_bytes
        got = device.to_host(mirror.get(buffer[:n], np.float16))
        np.testing.assert_array_equal(got, buffer[:n])
        assert mirror.uploaded_bytes - before == step * 8 * 2  # the new rows alone
    before = mirror.uploaded_bytes
    np.testing.assert_array_equal(device.to_host(mirror.get(buffer[:n], np.float16)), buffer[:n])
    assert mirror.uploaded_bytes == before  # nothing new, nothing sent
    assert len(mirror) == 1


def test_a_new_buffer_or_a_cast_is_sent_whole_and_stays_right(device):
    mirror = DeviceMirror()
    codes = np.zeros(64, np.int8)
    codes[:10] = np.arange(10)
    np.testing.assert_array_equal(device.to_host(mirror.get(codes[:10], np.float32)), np.arange(10, dtype=np.float32))
    codes[10:40] = -3
    got = device.to_host(mirror.get(codes[:40], np.float32))  # past the device buffer's room: grown
    assert got.dtype == np.float32 and got[:10].tolist() == list(range(10)) and (got[10:] == -3).all()
    replaced = np.concatenate([codes[:40], np.full(30, 7, np.int8)])  # the index's new, larger buffer
    before = mirror.uploaded_bytes
    np.testing.assert_array_equal(device.to_host(mirror.get(replaced, np.float32)), replaced.astype(np.float32))
    assert mirror.uploaded_bytes - before == replaced.size * 4
    del replaced
    assert len(mirror) == 1  # the replaced buffer's copy went with it
