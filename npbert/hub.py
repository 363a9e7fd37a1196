"""Checkpoints from the Hugging Face Hub, fetching only the five embedding tensors.

bert-base-uncased's model.safetensors is 440 MB, its embedding tensors 94 MB. A repo id
resolves to a small local checkpoint directory, keyed by repo and resolved commit:

    {HF_HUB_CACHE}/npbert/models--{org}--{name}/{commit}/
        config.json, tokenizer.json | vocab.txt, tokenizer_config.json   (hf_hub_download)
        model.safetensors     the five embedding tensors only, fetched with HTTP Range requests

The tensors' offsets come from huggingface_hub's safetensors header parser; the requests go
through huggingface_hub's session with its headers and token (HF_TOKEN or `hf auth login`).
The directory is built under a temporary name and renamed into place under a file lock, so an
interrupted fetch never leaves anything that loads, and two processes can fetch at once.

A cached model loads with no network call, a branch or tag through the Hub cache's refs;
`npbert fetch` asks the Hub again. With full=True (`--full`) the whole weights file is
downloaded with hf_hub_download instead, checked by the Hub's own machinery.
"""

import json
import shutil
import struct
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from npbert.atomic import building_directory
from npbert.checkpoint import INDEX_FILE, WEIGHTS_FILE, embedding_tensor_names, no_safetensors
from npbert.config import read_config
from npbert.errors import InputError

SMALL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt")
GAP = 1 << 16  # tensors closer than this in a file are fetched with one Range request
DTYPE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}  # for TensorSpec


class RangeIgnored(Exception):
    """The server answered a Range request with the whole file (200, not 206)."""


@dataclass(frozen=True)
class Fetched:
    """What a fetch did: where the checkpoint is and how many bytes it took."""

    directory: Path
    source: dict
    fetched_bytes: int  # of the weights file(s): headers and tensor ranges
    full_bytes: int  # size of the weights file(s) on the Hub
    cached: bool  # found in the cache, nothing downloaded


def resolve(model: str, *, revision: str | None = None, full: bool = False) -> tuple[Path, dict]:
    """(directory holding config.json, tokenizer and weights, source metadata)."""
    path = Path(model).expanduser()
    if path.is_dir():
        if revision is not None:
            raise InputError(f"a revision applies to Hub repo ids, and {model} is a directory")
        return path, {"model": str(path.resolve())}
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise InputError(f"{model}: no such checkpoint directory")
    fetched = fetch(model, revision=revision, full=full, refresh=False)
    return fetched.directory, fetched.source


def fetch(repo_id: str, *, revision=None, full=False, refresh=True) -> Fetched:
    """The checkpoint of a Hub repo, from the cache unless `refresh`, else from the Hub."""
    from huggingface_hub import constants

    with hub_errors(repo_id, revision):
        if not refresh or constants.HF_HUB_OFFLINE:
            cached = from_cache(repo_id, revision, full)
            if cached is not None:
                return cached
        if constants.HF_HUB_OFFLINE:
            raise InputError(
                f"{repo_id} is not in the cache and HF_HUB_OFFLINE is set: unset it and run "
                f"`npbert fetch {repo_id}` once with network access"
            )
        return download(repo_id, revision, full)


def cache_dir(repo_id: str, commit: str) -> Path:
    """Where npbert keeps a repo's embedding-only checkpoint for one commit."""
    from huggingface_hub import constants

    return (
        Path(constants.HF_HUB_CACHE) / "npbert" / f"models--{repo_id.replace('/', '--')}" / commit
    )


def from_cache(repo_id: str, revision: str | None, full: bool) -> Fetched | None:
    """A cached checkpoint, found with no network call, or None."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    if not isinstance(config, str):
        return None
    snapshot = Path(config).parent
    commit = snapshot.name
    candidates = [snapshot] if full else [cache_dir(repo_id, commit), snapshot]
    for directory in candidates:
        if (directory / WEIGHTS_FILE).is_file() or (directory / INDEX_FILE).is_file():
            size = _weights_size(directory)
            source = _source(repo_id, revision, commit, partial=directory != snapshot)
            return Fetched(directory, source, 0, size, True)
    return None


def _weights_size(directory: Path) -> int:
    """Size on the Hub of the weights an embedding-only file was cut from (or of the files)."""
    from safetensors import safe_open

    single = directory / WEIGHTS_FILE
    if single.is_file():
        with safe_open(single, framework="numpy") as f:
            recorded = (f.metadata() or {}).get("npbert.full_bytes")
        return int(recorded) if recorded else single.stat().st_size
    shards = set(json.loads((directory / INDEX_FILE).read_text())["weight_map"].values())
    return sum((directory / s).stat().st_size for s in shards if (directory / s).is_file())


def _source(repo_id: str, revision: str | None, commit: str, partial: bool) -> dict:
    return {
        "model": repo_id,
        "revision": revision or "main",
        "commit": commit,
        "weights": "embedding tensors only" if partial else "full file",
    }


def download(repo_id: str, revision: str | None, full: bool) -> Fetched:
    """Fetch from the Hub: small files whole, then the weights (ranges, or whole with full)."""
    from huggingface_hub import HfApi, hf_hub_download

    # config.json first, by the revision asked for: this resolves the commit and records
    # the branch or tag in the Hub cache's refs, so later loads find it with no request.
    snapshot = Path(hf_hub_download(repo_id, "config.json", revision=revision)).parent
    commit = snapshot.name
    files = {s.rfilename for s in HfApi().model_info(repo_id, revision=commit).siblings or []}
    if WEIGHTS_FILE not in files and INDEX_FILE not in files:
        raise no_safetensors(f"{repo_id} at {commit[:12]}", sorted(files))
    for name in SMALL_FILES[1:]:  # the tokenizer files there are
        if name in files:
            hf_hub_download(repo_id, name, revision=commit)
    if not full:
        try:
            return fetch_embeddings(repo_id, revision, commit, files, snapshot)
        except RangeIgnored:
            print(
                f"npbert: the server ignored the Range request for {repo_id}; "
                "downloading the whole weights file instead",
                file=sys.stderr,
            )
    weights = _weights_to_fetch(repo_id, commit, files, snapshot)
    for name in weights:
        hf_hub_download(repo_id, name, revision=commit)
    size = sum((snapshot / name).stat().st_size for name in weights)
    return Fetched(snapshot, _source(repo_id, revision, commit, False), size, size, False)


def _weights_to_fetch(repo_id: str, commit: str, files: set[str], snapshot: Path) -> list[str]:
    """The single weights file, or the index and only the shards holding the embeddings."""
    if WEIGHTS_FILE in files:
        return [WEIGHTS_FILE]
    weight_map = _weight_map(repo_id, commit)
    _, names = embedding_tensor_names(read_config(snapshot), weight_map, f"{repo_id}/{INDEX_FILE}")
    return [INDEX_FILE, *sorted({weight_map[n] for n in names.values()})]


def _weight_map(repo_id: str, commit: str) -> dict[str, str]:
    from huggingface_hub import hf_hub_download

    index = Path(hf_hub_download(repo_id, INDEX_FILE, revision=commit))
    return json.loads(index.read_text(encoding="utf-8"))["weight_map"]


def fetch_embeddings(repo_id, revision, commit, files, snapshot) -> Fetched:
    """Range-fetch the five tensors into cache_dir(repo_id, commit), atomically, under a lock."""
    from huggingface_hub.utils import WeakFileLock

    target = cache_dir(repo_id, commit)
    target.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(target.parent / f"{commit}.lock"):
        if (target / WEIGHTS_FILE).is_file():  # cached before, or by another process meanwhile
            source = _source(repo_id, revision, commit, True)
            return Fetched(target, source, 0, _weights_size(target), True)
        with building_directory(target) as building:
            fetched, full_size = _write_embeddings(repo_id, commit, files, snapshot, building)
            for name in SMALL_FILES:
                if (snapshot / name).is_file():
                    shutil.copyfile(snapshot / name, building / name)
    return Fetched(target, _source(repo_id, revision, commit, True), fetched, full_size, False)


def _write_embeddings(repo_id, commit, files, snapshot, directory: Path) -> tuple[int, int]:
    """Fetch the five tensors' bytes and write them, as stored, to directory/model.safetensors.

    Returns (bytes of headers and tensors fetched, full size of the weights file(s)).
    """
    from safetensors import TensorSpec, serialize_file

    names, weight_map, headers = _locate_embeddings(repo_id, commit, files, snapshot)
    tensors, fetched, full_size = {}, 0, 0  # tensor name -> its bytes
    for shard, header in headers.items():
        data_start = 8 + _header_length(repo_id, shard, commit)
        full_size += data_start + max(t.data_offsets[1] for t in header.tensors.values())
        fetched += data_start
        wanted = sorted(
            (header.tensors[n].data_offsets, n) for n in names.values() if weight_map[n] == shard
        )
        for group in _coalesce(wanted):
            begin, end = group[0][0][0], group[-1][0][1]
            block = np.frombuffer(
                fetch_range(repo_id, shard, commit, data_start + begin, data_start + end), np.uint8
            )
            fetched += block.nbytes
            for (b, e), name in group:
                tensors[name] = block[b - begin : e - begin]
    specs = {}
    for name, data in tensors.items():  # `tensors` keeps the buffers alive while serializing
        info = headers[weight_map[name]].tensors[name]
        specs[name] = TensorSpec(
            dtype=DTYPE_NAMES.get(info.dtype, info.dtype),
            shape=info.shape,
            data_ptr=data.ctypes.data,
            data_len=data.nbytes,
        )
    metadata = {
        "format": "pt",
        "npbert.repo": repo_id,
        "npbert.commit": commit,
        "npbert.files": ",".join(headers),
        "npbert.full_bytes": str(full_size),
    }
    serialize_file(specs, directory / WEIGHTS_FILE, metadata=metadata)
    return fetched, full_size


def _coalesce(ranges: list[tuple[tuple[int, int], str]]) -> list[list]:
    """Group sorted ((begin, end), name) ranges that lie within GAP bytes of each other,
    so tensors stored side by side come in one request."""
    groups: list[list] = []
    for item in ranges:
        if groups and item[0][0] - groups[-1][-1][0][1] <= GAP:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def _locate_embeddings(repo_id, commit, files, snapshot) -> tuple[dict, dict, dict]:
    """(field -> tensor name, tensor name -> file, file -> parsed header) for the files
    holding the five tensors; huggingface_hub parses each header with a Range request."""
    from huggingface_hub import HfApi

    api = HfApi()
    headers = {}
    if WEIGHTS_FILE in files:
        headers[WEIGHTS_FILE] = api.parse_safetensors_file_metadata(
            repo_id, WEIGHTS_FILE, revision=commit
        )
        weight_map = dict.fromkeys(headers[WEIGHTS_FILE].tensors, WEIGHTS_FILE)
    else:
        weight_map = _weight_map(repo_id, commit)
    _, names = embedding_tensor_names(read_config(snapshot), weight_map, repo_id)
    for shard in sorted({weight_map[n] for n in names.values()}):
        if shard not in headers:
            headers[shard] = api.parse_safetensors_file_metadata(repo_id, shard, revision=commit)
    return names, weight_map, headers


def _header_length(repo_id: str, filename: str, commit: str) -> int:
    """The safetensors format's first 8 bytes: the header's length, little-endian.

    huggingface_hub's parser reads it but does not return it, and the tensors' data_offsets
    are relative to the data buffer that starts after the header.
    """
    (length,) = struct.unpack("<Q", fetch_range(repo_id, filename, commit, 0, 8))
    return length


def fetch_range(repo_id: str, filename: str, commit: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of a file on the Hub, checked for length; RangeIgnored on a 200."""
    from huggingface_hub import get_session, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    url = hf_hub_url(repo_id, filename, revision=commit)
    headers = {**build_hf_headers(), "Range": f"bytes={start}-{end - 1}"}
    with get_session().stream("GET", url, headers=headers, follow_redirects=True) as response:
        hf_raise_for_status(response)
        if response.status_code != 206:
            raise RangeIgnored(url)
        data = response.read()
    if len(data) != end - start:
        raise InputError(
            f"{repo_id}/{filename}: asked for {end - start} bytes at offset {start}, got "
            f"{len(data)}; nothing was cached, try again"
        )
    return data


@contextmanager
def hub_errors(repo_id: str, revision: str | None):
    """huggingface_hub's and the network's exceptions as one-line InputErrors."""
    from huggingface_hub import constants
    from huggingface_hub import errors as hf

    at = f"{repo_id}" + (f" at revision {revision}" if revision else "")
    try:
        yield
    except hf.HFValidationError as error:
        raise InputError(f"{repo_id!r} is not a valid Hub repo id: {_first_line(error)}") from None
    except hf.GatedRepoError:
        raise InputError(
            f"{repo_id} is gated or private (401/403): accept its terms on the Hub, then pass a "
            "token with HF_TOKEN=... or `hf auth login`"
        ) from None
    except hf.RepositoryNotFoundError:
        raise InputError(
            f"{repo_id}: repository not found on {constants.ENDPOINT} (if it is private, pass a "
            "token with HF_TOKEN=... or `hf auth login`)"
        ) from None
    except hf.RevisionNotFoundError:
        raise InputError(f"{repo_id}: revision {revision!r} not found") from None
    except (hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled):  # before its base class
        raise InputError(
            f"cannot reach {constants.ENDPOINT} and {at} is not cached: connect, or set "
            "HF_ENDPOINT, and run `npbert fetch` once"
        ) from None
    except hf.EntryNotFoundError as error:
        raise InputError(f"{at}: file not found ({_first_line(error)})") from None
    except hf.HfHubHTTPError as error:
        raise InputError(f"{at}: the Hub answered {_first_line(error)}") from None
    except hf.HTTPError as error:  # the HTTP client's own: refused, reset, cut short
        raise InputError(
            f"{at}: network error talking to {constants.ENDPOINT} ({_first_line(error)}); "
            "nothing was cached, try again"
        ) from None


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
