"""A PEP 517 build backend for the airlock package, standard library only.

pip runs it from the source tree (backend-path in pyproject.toml), so
installing the SDK needs no package index: it writes a pure-Python wheel
of the airlock/ directory, and an sdist of the tree.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "airlock"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))
TAG = "py3-none-any"


def _metadata() -> str:
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {VERSION}\n"
        "Summary: Python SDK of the airlock sandbox daemon (airlock serve)\n"
        "Requires-Python: >=3.9\n"
        "License: Apache-2.0\n"
    )


def _files():
    root = os.path.join(HERE, NAME)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, f)
            yield full, os.path.relpath(full, HERE).replace(os.sep, "/")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _dist_info() -> str:
    return f"{NAME}-{VERSION}.dist-info"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(_metadata())
    with open(os.path.join(d, "WHEEL"), "w") as f:
        f.write(_wheel_file())
    return _dist_info()


def _wheel_file() -> str:
    return f"Wheel-Version: 1.0\nGenerator: airlock_build\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _write_wheel(wheel_directory, entries):
    name = f"{NAME}-{VERSION}-{TAG}.whl"
    path = os.path.join(wheel_directory, name)
    records = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            z.writestr(arc, data)
            records.append(_record_line(arc, data))
        di = _dist_info()
        for arc, data in ((f"{di}/METADATA", _metadata().encode()), (f"{di}/WHEEL", _wheel_file().encode())):
            z.writestr(arc, data)
            records.append(_record_line(arc, data))
        records.append(f"{di}/RECORD,,")
        z.writestr(f"{di}/RECORD", "\n".join(records) + "\n")
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    entries = []
    for full, arc in _files():
        with open(full, "rb") as f:
            entries.append((arc, f.read()))
    return _write_wheel(wheel_directory, entries)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file that puts this source tree on sys.path.
    return _write_wheel(wheel_directory, [(f"_{NAME}_editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for extra in ("pyproject.toml", "airlock_build.py", "README.md"):
            t.add(os.path.join(HERE, extra), arcname=f"{base}/{extra}")
        for full, arc in _files():
            t.add(full, arcname=f"{base}/{arc}")
        data = _metadata().encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return name
