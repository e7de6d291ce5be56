"""How far apart two colours look: the CIEDE2000 difference (delta E) of their CIELAB values,
for normal colour vision and for simulated dichromacy.

A delta E near 1 is the smallest difference most people see; two lines or boxes read as
different categories at a glance from about 20 (seaborn's "colorblind" orange and vermillion,
two of the kit's component colours once, differ by 17, and by 9 as a deuteranope sees them).
``plot_style.PALETTE`` is checked with ``delta_e`` in the tests. The simulation is Machado,
Oliveira & Fernandes (2009), severity 1, a 3 x 3 matrix on linear RGB; the CIEDE2000 formula
is Sharma, Wu & Dalal (2005), whose test pairs the tests reproduce.
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import to_rgb

#: Dichromacy -> the Machado et al. (2009) matrix (severity 1) on linear RGB.
VISIONS = {
    "normal": np.eye(3),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}
_SRGB_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                         [0.0193, 0.1192, 0.9505]])
_WHITE = np.array([0.95047, 1.0, 1.08883])  # D65


def lab(colour, vision: str = "normal") -> np.ndarray:
    """CIELAB (L*, a*, b*; D65) of a matplotlib colour as seen with ``vision`` (a key of
    ``VISIONS``)."""
    if vision not in VISIONS:
        raise ValueError(f"unknown vision {vision!r}; valid: {list(VISIONS)}")
    c = np.array(to_rgb(colour))
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    linear = np.clip(VISIONS[vision] @ linear, 0, 1)
    t = _SRGB_TO_XYZ @ linear / _WHITE
    f = np.where(t > (6 / 29) ** 3, np.cbrt(t), t / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def ciede2000(lab1, lab2) -> float:
    """The CIEDE2000 colour difference of two CIELAB values (k_L = k_C = k_H = 1)."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_mean = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(c_mean ** 7 / (c_mean ** 7 + 25 ** 7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2  # a* rescaled near the neutral axis
    c1, c2 = np.hypot(a1, b1), np.hypot(a2, b2)
    h1, h2 = np.degrees(np.arctan2(b1, a1)) % 360, np.degrees(np.arctan2(b2, a2)) % 360
    dh = h2 - h1  # the hue step, brought into [-180, 180]
    dh = 0.0 if c1 * c2 == 0 else dh - 360 if dh > 180 else dh + 360 if dh < -180 else dh
    d_l, d_c = l2 - l1, c2 - c1
    d_h = 2 * np.sqrt(c1 * c2) * np.sin(np.radians(dh / 2))
    l_mean, c_mean = (l1 + l2) / 2, (c1 + c2) / 2
    if c1 * c2 == 0:
        h_mean = h1 + h2
    elif abs(h1 - h2) <= 180:
        h_mean = (h1 + h2) / 2
    else:
        h_mean = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    t = (1 - 0.17 * np.cos(np.radians(h_mean - 30)) + 0.24 * np.cos(np.radians(2 * h_mean))
         + 0.32 * np.cos(np.radians(3 * h_mean + 6)) - 0.20 * np.cos(np.radians(4 * h_mean - 63)))
    s_l = 1 + 0.015 * (l_mean - 50) ** 2 / np.sqrt(20 + (l_mean - 50) ** 2)
    s_c, s_h = 1 + 0.045 * c_mean, 1 + 0.015 * c_mean * t
    r_c = 2 * np.sqrt(c_mean ** 7 / (c_mean ** 7 + 25 ** 7))
    r_t = -np.sin(np.radians(60 * np.exp(-(((h_mean - 275) / 25) ** 2)))) * r_c
    return float(np.sqrt((d_l / s_l) ** 2 + (d_c / s_c) ** 2 + (d_h / s_h) ** 2
                         + r_t * (d_c / s_c) * (d_h / s_h)))


def delta_e(colour1, colour2, vision: str = "normal") -> float:
    """How different two matplotlib colours look with ``vision`` (CIEDE2000 delta E)."""
    return ciede2000(lab(colour1, vision), lab(colour2, vision))


def closest_pair(colours: dict, vision: str = "normal") -> tuple[float, str, str]:
    """The two names of ``colours`` (name -> colour) that look most alike, with their delta E."""
    names = list(colours)
    return min((delta_e(colours[a], colours[b], vision), a, b)
               for i, a in enumerate(names) for b in names[i + 1:])
