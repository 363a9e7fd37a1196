"""Finding a checkpoint: a local directory as is, or a Hub repo id through huggingface_hub."""

from pathlib import Path

from npbert.errors import InputError


def resolve(model: str, *, revision: str | None = None) -> tuple[Path, dict]:
    """(directory holding config.json, tokenizer and weights, source metadata)."""
    path = Path(model).expanduser()
    if path.is_dir():
        if revision is not None:
            raise InputError(f"a revision applies to Hub repo ids, and {model} is a directory")
        return path, {"model": str(path.resolve())}
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        raise InputError(f"{model}: no such checkpoint directory")
    return download(model, revision)


def download(repo_id: str, revision: str | None) -> tuple[Path, dict]:
    from huggingface_hub import hf_hub_download

    config = Path(hf_hub_download(repo_id, "config.json", revision=revision))
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "model.safetensors"):
        _optional(repo_id, name, revision)
    return config.parent, {"model": repo_id, "revision": revision, "commit": config.parent.name}


def _optional(repo_id: str, filename: str, revision: str | None) -> Path | None:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision))
    except EntryNotFoundError:
        return None
