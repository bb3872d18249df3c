"""The spec ``accel spec transformers`` wrote (``accel_spec.py`` beside this file), with
every hook counted: which hooks transformers' tests called, written to ``calls.json``
at exit. Copied into transformers' test tree by test_transformers_suite.py."""

import atexit
import collections
import importlib.util
import json
from pathlib import Path

_loader = importlib.util.spec_from_file_location("accel_spec_counted", "accel_spec.py")
assert _loader is not None
assert _loader.loader is not None
_real = importlib.util.module_from_spec(_loader)
_loader.loader.exec_module(_real)
_calls: collections.Counter[str] = collections.Counter()
DEVICE_NAME = _real.DEVICE_NAME


def _counted(name, hook):
    def call(*args, **kwargs):
        _calls[name] += 1
        return hook(*args, **kwargs)

    return call


for _name in [name for name in vars(_real) if name.endswith("_FN")]:
    globals()[_name] = _counted(_name, getattr(_real, _name))
atexit.register(lambda: Path("calls.json").write_text(json.dumps(_calls)))
