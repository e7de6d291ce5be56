"""A table as arrays in an ``.npz`` (``vitplast.frames``): it comes back exactly, compressed
or not, with the extra entries beside it, and numpy reads it without pickle."""

import numpy as np
import pandas as pd
import pytest

from vitplast import frames


def test_a_table_comes_back_exactly_compressed_or_not_with_its_extra_entries(tmp_path):
    df = pd.DataFrame({"task": ["a", None, "c"], "layer": [0, 1, 2],
                       "component": pd.Categorical(["MHA", "FC1", "MHA"], ["MHA", "FC1"]),
                       "rate": np.float32([0.5, 1.5, 2.5]),
                       "ok": pd.array([True, None, False], dtype="boolean")})
    df.attrs["note"] = "x"
    for compressed in (False, True):
        path = tmp_path / f"t{compressed}.npz"
        with open(path, "wb") as f:
            frames.write_frame(df, f, compressed=compressed, kept='{"a": 1}')
        got = frames.read_frame(path)
        pd.testing.assert_frame_equal(got, df)
        assert got.attrs == {"note": "x"}
        with np.load(path, allow_pickle=False) as z:
            assert str(z["kept"]) == '{"a": 1}'
    with pytest.raises(TypeError, match="default index"), open(tmp_path / "u.npz", "wb") as f:
        frames.write_frame(df.set_index("rate"), f)
