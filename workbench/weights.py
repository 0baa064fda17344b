"""A content fingerprint of safetensors weight files, computed once per file version; and the
check that a checkpoint's tensors are the ones its model needs, by name and shape (`load_checked`).

A run's identity includes its model's weights (the manifest's `model.fingerprint`), so that a
resume never mixes answers of two models. A file's digest is SHA-256 over each tensor, in name
order: its name, dtype and shape from the safetensors header, then its bytes. It changes when
any weight does, and not when only the header's metadata or the tensor order does.

Hashing reads the whole file (about a second per GB). The digest is kept in a small JSON cache
keyed by the file's resolved path and its size, modification and change times (ns) and inode,
so an untouched file is never read twice; a file written in place gets new times and is hashed
again. Entries of deleted files are dropped; a cache that cannot be read or written is ignored
(the digest is then recomputed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
from pathlib import Path

from workbench.atomic import write_json
from workbench.errors import WorkbenchError

BLOCK = 1 << 20
MAX_HEADER = 100 << 20  # the safetensors format's own limit on its JSON header


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def file_sha256(path: Path) -> str:
    """SHA-256 of a whole file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def tensors_sha256(path: Path) -> str:
    """SHA-256 over the tensors of a safetensors file (see the module docstring)."""
    path = Path(path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        try:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > MAX_HEADER:
                raise ValueError(f"header of {length} bytes")
            header = json.loads(handle.read(length))
            tensors = {name: info for name, info in header.items() if name != "__metadata__"}
            spans = {name: [int(x) for x in info["data_offsets"]] for name, info in tensors.items()}
        except (struct.error, ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as err:
            raise WorkbenchError(f"{path} is not a readable safetensors file ({type(err).__name__}: {err})") from None
        base = 8 + length
        for name in sorted(tensors):
            begin, end = spans[name]
            digest.update(json.dumps([name, tensors[name].get("dtype"), tensors[name].get("shape")]).encode())
            handle.seek(base + begin)
            left = end - begin
            while left > 0:
                block = handle.read(min(BLOCK, left))
                if not block:
                    raise WorkbenchError(f"{path} is truncated: tensor {name!r} ends past the end of the file")
                digest.update(block)
                left -= len(block)
    return digest.hexdigest()


def weights_sha256(files: list[Path], cache: Path | None = None) -> dict[str, str]:
    """{file name: `tensors_sha256`} of each file, read from and written to the JSON `cache` (keyed by
    path and file version) when one is given."""
    known = {}
    if cache is not None:
        try:
            known = json.loads(Path(cache).read_text())
        except (OSError, ValueError):
            known = {}
        known = known if isinstance(known, dict) else {}
    out, changed = {}, False
    for path in files:
        key, stamp = str(Path(path).resolve()), _stamp(Path(path))
        entry = known.get(key)
        if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
            out[Path(path).name] = entry["sha256"]
            continue
        out[Path(path).name] = tensors_sha256(Path(path))
        known[key], changed = {"stamp": stamp, "sha256": out[Path(path).name]}, True
    if cache is not None and changed:
        known = {key: entry for key, entry in known.items() if Path(key).exists()}  # forget deleted files
        try:
            Path(cache).parent.mkdir(parents=True, exist_ok=True)
            write_json(Path(cache), known)
        except OSError:
            pass  # an unwritable cache costs a recomputation next time, nothing else
    return out


def load_checked(load, where: str):
    """The model `load()` returns with its loading info (transformers' `from_pretrained(...,
    output_loading_info=True, ignore_mismatched_sizes=True)`), refused by `check_loaded_keys`; any
    error of the load is one line. transformers' key table is held back and shown only where the
    load neither failed on it nor was refused (a refusal names the keys itself)."""
    with _HeldLoadReport() as report:
        try:
            model, info = load()
        except Exception as err:  # noqa: BLE001 - safetensors, torch and transformers raise many types here
            report.release()
            text = str(err).strip()
            raise WorkbenchError(f"could not load the weights from {where} (corrupt or truncated file?): "
                                 f"{type(err).__name__}: {text.splitlines()[0] if text else ''}") from None
        check_loaded_keys(info, where)
        report.release()
    return model


def check_loaded_keys(info: dict, where: str, shown: int = 3) -> None:
    """Refuse, naming a few keys, a checkpoint that lacks a weight its model needs, holds one it does
    not, or holds one of another shape (`info`: transformers' `output_loading_info`, loaded with
    `ignore_mismatched_sizes=True` so that a shape is reported, not raised), where transformers would
    start the missing ones at random. Tied weights (an `lm_head` that is the embedding) are never missing."""
    mismatched = sorted((str(key), tuple(stored), tuple(needed)) for key, stored, needed in info.get("mismatched_keys") or ())
    if mismatched:
        key, stored, needed = mismatched[0]
        more = f" (and {len(mismatched) - 1} more tensors of another shape)" if len(mismatched) > 1 else ""
        raise WorkbenchError(f"{where}: the weights do not match its config.json: tensor {key} has shape "
                             f"{_shape(stored)} in the checkpoint but the config needs {_shape(needed)}{more}")
    parts = []
    for label, field in (("missing", "missing_keys"), ("unexpected", "unexpected_keys")):
        keys = sorted(map(str, info.get(field) or ()))
        if keys:
            more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
            parts.append(f"{len(keys)} {label} ({', '.join(keys[:shown])}{more})")
    if parts:
        raise WorkbenchError(f"{where}: the weights do not match its config.json: {'; '.join(parts)}; a checkpoint "
                             f"must hold every weight its config needs and no other")


def _shape(dims) -> str:
    return "[" + ", ".join(str(int(d)) for d in dims) + "]"


class _HeldLoadReport(logging.Filter):
    """Within the block, transformers' weight-loading report (its MISSING / UNEXPECTED / MISMATCH
    key table, logged as a warning) is held back; `release()` logs what was held. A block that
    ends without releasing (a refusal, which names the keys in one line) drops it."""

    _LOGGER = "transformers.modeling_utils"

    def __init__(self):
        super().__init__()
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if "LOAD REPORT" in str(record.msg):
            self.held.append(record)
            return False
        return True

    def release(self) -> None:
        held, self.held = self.held, []
        logger = logging.getLogger(self._LOGGER)
        logger.removeFilter(self)
        for record in held:
            logger.handle(record)

    def __enter__(self):
        logging.getLogger(self._LOGGER).addFilter(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger(self._LOGGER).removeFilter(self)
