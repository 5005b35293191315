"""The KV cache's ``rows``: the keys and values appended at those positions, and only
positions the cache holds."""

from __future__ import annotations

import numpy as np
import pytest

from oracle.kv_cache import KVCache


def test_rows_are_what_was_appended_and_only_what_is_held() -> None:
    rng = np.random.default_rng(0)
    cache = KVCache(n_layer=2, n_head_kv=2, head_dim=4, n_ctx=64)
    blocks = []
    for t in (3, 20):  # the second block grows the storage past its first capacity
        ks = [rng.normal(size=(2, t, 4)).astype(np.float32) for _ in range(2)]
        vs = [rng.normal(size=(2, t, 4)).astype(np.float32) for _ in range(2)]
        for layer in range(2):
            cache.append(layer, ks[layer], vs[layer])
        cache.advance(t)
        blocks.append((ks, vs))
    for layer in range(2):
        k, v = cache.rows(layer, 0, 23)
        np.testing.assert_array_equal(k, np.concatenate([b[0][layer] for b in blocks], axis=1))
        np.testing.assert_array_equal(v, np.concatenate([b[1][layer] for b in blocks], axis=1))
        np.testing.assert_array_equal(cache.rows(layer, 3, 5)[0], blocks[1][0][layer][:, :2])
    cache.truncate(10)
    assert cache.rows(1, 10, 10)[0].shape == (2, 0, 4)
    for start, end in ((0, 11), (5, 4), (-1, 3)):
        with pytest.raises(ValueError, match="not among the 10 cached"):
            cache.rows(0, start, end)
