"""How far apart colours look (``vitplast.report.colour_vision``): CIEDE2000 against the
published test pairs, CIELAB of known colours, and greys that a dichromat sees unchanged."""

import pytest

from vitplast.report import colour_vision
from vitplast.report.colour_vision import ciede2000, delta_e, lab

#: Sharma, Wu & Dalal (2005), Table 1: (Lab 1, Lab 2, delta E00), across the hue wrap-around,
#: near-neutral and dark pairs.
SHARMA = [((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
          ((50.0, 3.1571, -77.2803), (50.0, 0.0, -82.7485), 2.8615),
          ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
          ((50.0, 2.49, -0.001), (50.0, -2.49, 0.0009), 7.1792),
          ((50.0, 2.49, -0.001), (50.0, -2.49, 0.0011), 7.2195),
          ((50.0, -0.001, 2.49), (50.0, 0.0009, -2.49), 4.8045),
          ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
          ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
          ((2.0776, 0.0795, -1.135), (0.9033, -0.0636, -0.5514), 0.9082)]


@pytest.mark.parametrize("lab1, lab2, expected", SHARMA)
def test_ciede2000_reproduces_the_published_pairs(lab1, lab2, expected):
    assert ciede2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)
    assert ciede2000(lab2, lab1) == pytest.approx(expected, abs=1e-4)  # symmetric


def test_cielab_of_known_colours():
    assert lab("#ffffff") == pytest.approx([100.0, 0.0, 0.0], abs=0.02)
    assert lab("#ff0000") == pytest.approx([53.24, 80.09, 67.20], abs=0.05)
    assert lab("#808080")[0] == pytest.approx(53.59, abs=0.01)


def test_a_dichromat_sees_greys_unchanged_and_red_and_green_alike_in_hue():
    for vision in ("deuteranopia", "protanopia", "tritanopia"):
        assert delta_e("#949494", "#949494", vision) == 0.0
        assert lab("#949494", vision) == pytest.approx(lab("#949494"), abs=1e-3)
    red, green = lab("#ff0000", "deuteranopia"), lab("#00ff00", "deuteranopia")
    assert abs(red[1]) < 10 and abs(green[1]) < 10  # no red-green axis left
    assert delta_e("#ff0000", "#00ff00") > 3 * delta_e("#ff0000", "#00ff00", "deuteranopia")


def test_an_unknown_vision_names_the_valid_ones():
    with pytest.raises(ValueError, match="deuteranopia"):
        lab("#000000", "colourblind")
    assert colour_vision.closest_pair({"a": "#000000", "b": "#000001", "c": "#ffffff"})[1:] == (
        "a", "b")
