"""pytest, for tests/ and notebooks/ alike: no test and no notebook kernel sees a real data set
other than scikit-learn's digits, or downloads one.

The data root (``FROST_DATA``) and Debian's data folder (``FROST_SYSTEM_DATA``, normally
``/usr/share/datasets``) point at an empty folder and ``FROST_OFFLINE`` switches downloads off,
process-wide before any kernel starts (kernels inherit the environment). A machine that happens
to have Fashion-MNIST installed therefore cannot hide a test's dependency on it: such a test
fails everywhere. Tests that need another data set fabricate its files in a temporary folder.
"""

import os
import tempfile


def pytest_configure(config):
    empty = tempfile.mkdtemp(prefix="frost_nb_no_data_")
    os.environ["FROST_DATA"] = empty
    os.environ["FROST_SYSTEM_DATA"] = empty
    os.environ["FROST_OFFLINE"] = "1"
