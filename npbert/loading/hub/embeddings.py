"""The embedding tensors of a weights file on the Hub, fetched with Range requests: its header
first, checked as a local file's is, the tensors' shapes held to config.json, then only the
tensors' bytes, written as stored to a safetensors file."""

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from npbert.errors import InputError, first_line
from npbert.loading.checkpoint import (
    INDEX_FILE,
    WEIGHTS_FILE,
    checked_config,
    describe,
    embedding_tensor_names,
)
from npbert.loading.header import TensorHeader, header_length, parse_header, require_floats
from npbert.loading.hub.access import Access, download_timeout
from npbert.loading.hub.errors import cache_write_error
from npbert.loading.hub.files import weight_map
from npbert.loading.hub.ranges import get_range

GAP = 1 << 16  # tensors closer than this in a file are fetched with one Range request
DTYPE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}  # for TensorSpec


@dataclass(frozen=True)
class RemoteFile:
    """A safetensors file on the Hub, as its header describes it."""

    url: str
    where: str  # repo/file at commit, for messages
    size: int  # bytes, from the Content-Range of the header's requests
    etag: str  # the ETag of the first, "" where the server sends none
    data_start: int  # 8 + the header's length
    tensors: dict[str, TensorHeader]


def write_embeddings(repo_id, commit, files, config, directory: Path, access) -> tuple:
    """Fetch the embedding tensors' bytes and write them, as stored, to
    directory/model.safetensors. Returns (bytes of headers and tensors fetched, full size of
    the weights file(s) holding them, (those files, the weights files))."""
    from huggingface_hub.utils import tqdm

    names, mapped, remotes = locate_embeddings(repo_id, commit, files, config, access)
    plan = {  # file -> groups of ((begin, end), name), tensors side by side in one group
        shard: coalesce(
            sorted((remote.tensors[n].data_offsets, n) for n in names if mapped[n] == shard)
        )
        for shard, remote in remotes.items()
    }
    total = sum(g[-1][0][1] - g[0][0][0] for groups in plan.values() for g in groups)
    tensors = {}  # tensor name -> its bytes
    # disable=None: a bar on a terminal only, as huggingface_hub's downloads do
    with tqdm(total=total, unit="B", unit_scale=True, desc=WEIGHTS_FILE, disable=None) as bar:
        for shard, groups in plan.items():
            remote = remotes[shard]
            for group in groups:
                begin, end = group[0][0][0], group[-1][0][1]
                at = remote.data_start
                block = get(remote, at + begin, at + end, access, bar)
                for (b, e), name in group:
                    tensors[name] = block[b - begin : e - begin]
    fetched = total + sum(remote.data_start for remote in remotes.values())
    full_size = sum(remote.size for remote in remotes.values())
    record = {"repo": repo_id, "commit": commit, "files": list(remotes), "full_bytes": full_size}
    serialize(tensors, remotes, mapped, directory / WEIGHTS_FILE, record)
    return fetched, full_size, (len(remotes), len(set(mapped.values())))


def serialize(tensors: dict, remotes: dict, mapped: dict, path: Path, record: dict) -> None:
    """Write the tensors' bytes as stored, with `record` as the file's npbert metadata."""
    from safetensors import SafetensorError, TensorSpec, serialize_file

    specs = {}
    for name, data in tensors.items():  # `tensors` keeps the buffers alive while serializing
        info = remotes[mapped[name]].tensors[name]
        specs[name] = TensorSpec(
            dtype=DTYPE_NAMES[info.dtype],
            shape=info.shape,
            data_ptr=data.ctypes.data,
            data_len=data.nbytes,
        )
    # One metadata entry, its JSON with sorted keys: safetensors writes the metadata from a
    # hash map, in an order that changes from run to run, and the same commit must give the
    # same file (npbert vectors records its sha256).
    metadata = {"npbert": json.dumps(record, sort_keys=True)}
    try:
        serialize_file(specs, path, metadata=metadata)
    except SafetensorError as error:  # safetensors reports the OS's error (a full disk) in it
        raise cache_write_error(path, first_line(error)) from None


def get(remote: RemoteFile, start: int, end: int, access: Access, bar=None) -> np.ndarray:
    """Bytes [start, end) of a remote file, which must not have changed meanwhile: its size
    and ETag are held to its first request's. (A URL at a commit names one file on the Hub;
    a mirror or proxy may still serve another version between two requests.)"""
    data, size, etag = get_range(
        remote.url, start, end, token=access.token, timeout=download_timeout(), progress=bar
    )
    if size != remote.size:
        raise InputError(
            f"{remote.where}: {remote.size:,} bytes, then the server said {size:,}; nothing "
            "was cached, try again"
        )
    if etag and remote.etag and etag.removeprefix("W/") != remote.etag.removeprefix("W/"):
        raise InputError(
            f"{remote.where}: the server sent another version of the file between two "
            f"requests (ETag {remote.etag}, then {etag}); nothing was cached, try again"
        )
    return data


def coalesce(ranges: list[tuple[tuple[int, int], str]]) -> list[list]:
    """Group sorted ((begin, end), name) ranges that lie within GAP bytes of each other,
    so tensors stored side by side come in one request."""
    groups: list[list] = []
    for item in ranges:
        if groups and item[0][0] - groups[-1][-1][0][1] <= GAP:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def locate_embeddings(repo_id, commit, files, config, access) -> tuple[list, dict, dict]:
    """(names of the embedding tensors, tensor name -> file, file -> RemoteFile) for the files
    holding them, each header fetched and checked before any offset in it is used, and the
    tensors' shapes checked against config.json before any of their bytes is fetched (a
    header that disagrees would cost its whole download, or more memory than there is)."""
    remotes = {}
    if WEIGHTS_FILE in files:
        remotes[WEIGHTS_FILE] = remote_header(repo_id, WEIGHTS_FILE, commit, access)
        mapped = dict.fromkeys(remotes[WEIGHTS_FILE].tensors, WEIGHTS_FILE)
    else:
        mapped = weight_map(repo_id, commit, files, access)
    model_type, names = embedding_tensor_names(config, mapped, repo_id)
    for shard in sorted({mapped[n] for n in names.values()}):
        if shard not in remotes:
            remotes[shard] = remote_header(repo_id, shard, commit, access)
        held = [n for n in names.values() if mapped[n] == shard]
        missing = [n for n in held if n not in remotes[shard].tensors]
        if missing:
            raise InputError(f"{repo_id}/{INDEX_FILE} puts {missing[0]} in {shard}, which lacks it")
        require_floats(remotes[shard].tensors, held, remotes[shard].where)
    stored = {}
    for field, name in names.items():
        remote = remotes[mapped[name]]
        stored[field] = describe(Path(mapped[name]), name, remote.data_start, remote.tensors)
    at = f"{repo_id} at {commit[:12]}"
    checked_config(config, model_type, stored, at, f"{repo_id}/config.json at {commit[:12]}")
    return list(names.values()), mapped, remotes


def remote_header(repo_id: str, filename: str, commit: str, access: Access) -> RemoteFile:
    """A weights file's header on the Hub, with two Range requests (its length, then the
    header), checked by npbert.loading.header as a local file is checked."""
    from huggingface_hub import hf_hub_url

    url = hf_hub_url(repo_id, filename, revision=commit)
    where = f"{repo_id}/{filename} at {commit[:12]}"
    prefix, size, etag = get_range(url, 0, 8, token=access.token, timeout=download_timeout())
    length = header_length(prefix.tobytes(), size, where)
    file = RemoteFile(url, where, size, etag, 8 + length, {})
    raw = get(file, 8, 8 + length, access)
    return replace(file, tensors=parse_header(raw.tobytes(), size - 8 - length, where))
